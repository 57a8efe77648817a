package pkgbuild

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// passwordInURL matches a URL with a password in its user information.
var passwordInURL = regexp.MustCompile(`[a-z+]+://[^/@\s"]*:[^/@\s"]*@`)

// TestShippedDefaultsKeepStorePasswordOffCommandLine: the defaults files
// the host package installs (world-readable, and their *_OPTS become a
// command line every user sees) never carry a store password in a URL,
// not even in an example, and both units load the store password from a
// root-only environment file instead.
func TestShippedDefaultsKeepStorePasswordOffCommandLine(t *testing.T) {
	dist := filepath.Join("..", "..", "hostctl", "dist")
	for _, name := range []string{"hostctl", "vmeta-metadata"} {
		b, err := os.ReadFile(filepath.Join(dist, "default", name))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if passwordInURL.MatchString(line) || strings.Contains(line, "user:password@") {
				t.Errorf("default/%s:%d: a store password in a URL: %q", name, i+1, line)
			}
		}
		if !strings.Contains(string(b), "VMETA_STORE_PASSWORD") {
			t.Errorf("default/%s does not say where the store password goes", name)
		}
		unit, err := os.ReadFile(filepath.Join(dist, "systemd", name+".service"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(unit), "\nEnvironmentFile=-/etc/vmeta/store.env\n") {
			t.Errorf("%s.service does not load the store password from /etc/vmeta/store.env", name)
		}
	}
}
