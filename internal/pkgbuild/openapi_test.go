package pkgbuild

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHostPackageInstallsOpenAPI: the host package installs the admin
// API's OpenAPI description (hostctl/api/openapi.yaml, which hostctl
// embeds and serves at GET /v1/openapi.json) as
// /usr/share/vmeta/openapi.yaml. The package's contents are listed with
// this test's own binary standing in for hostctl and vmeta-metadata (a
// Go binary whose licenses can be listed), so nothing is built.
func TestHostPackageInstallsOpenAPI(t *testing.T) {
	root := filepath.Dir(goEnv(t, "GOMOD"))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, name := range []string{"hostctl", "vmeta-metadata"} {
		if err := os.WriteFile(filepath.Join(bin, name), exe, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	in := Inputs{Root: root, Bin: bin, Describe: "v1.2.3", MTime: time.Unix(1700000000, 0).UTC(),
		Maintainer: "Test <test@example.org>", ModCache: goEnv(t, "GOMODCACHE"), GoRoot: goEnv(t, "GOROOT")}
	info, err := hostInfo(in, "deb", "1.2.3", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range info.Contents {
		if c.Destination != "/usr/share/vmeta/openapi.yaml" {
			continue
		}
		b, err := os.ReadFile(c.Source)
		if err != nil {
			t.Fatal(err)
		}
		if c.Source != filepath.Join(root, "hostctl", "api", "openapi.yaml") || !bytes.HasPrefix(b, []byte("#")) || !bytes.Contains(b, []byte("\nopenapi: 3.1")) {
			t.Errorf("/usr/share/vmeta/openapi.yaml is %s, not hostctl/api/openapi.yaml", c.Source)
		}
		if c.FileInfo == nil || c.FileInfo.Mode != 0o644 {
			t.Errorf("/usr/share/vmeta/openapi.yaml: file info %+v, want mode 0644", c.FileInfo)
		}
		return
	}
	t.Error("the host package does not install /usr/share/vmeta/openapi.yaml")
}
