package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretCLI: hostctl secret create|list|show|delete through a daemon:
// a passphrase from a file never appears in any output, the store file or
// the daemon's log; the key file is 0600; a bad uuid and an unknown secret
// are refused with what is wrong.
func TestSecretCLI(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	pass := "e2e-passphrase-" + strings.Repeat("x", 20)
	pf := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(pf, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var created struct {
		UUID      string `json:"uuid"`
		ProjectID string `json:"project_id"`
		Name      string `json:"name"`
	}
	r := d.MustCtl("secret", "create", "--name", "backup", "--project", "demo", "--payload-file", pf, "--output", "json")
	decodeJSON(t, r.stdout, &created)
	if created.UUID == "" || created.ProjectID != "demo" || created.Name != "backup" {
		t.Fatalf("created %+v", created)
	}
	gen := d.MustCtl("secret", "create", "--project", "demo")
	list := d.MustCtl("secret", "list")
	show := d.MustCtl("secret", "show", created.UUID)
	for _, out := range []string{r.stdout, gen.stdout, list.stdout, show.stdout, r.stderr} {
		if strings.Contains(out, pass) {
			t.Fatalf("the passphrase was printed:\n%s", out)
		}
	}
	if !strings.Contains(list.stdout, created.UUID) || !strings.Contains(show.stdout, "Wrapped by:") {
		t.Errorf("list:\n%s\nshow:\n%s", list.stdout, show.stdout)
	}
	var all []json.RawMessage
	decodeJSON(t, d.MustCtl("secret", "list", "--project", "demo", "--output", "json").stdout, &all)
	if len(all) != 2 {
		t.Errorf("%d secrets of project demo, want 2", len(all))
	}
	if r := d.Ctl("secret", "show", "not-a-uuid"); r.code == 0 || !strings.Contains(r.stderr, `secret uuid "not-a-uuid": not a UUID`) {
		t.Errorf("show not-a-uuid: %s", r)
	}
	d.MustCtl("secret", "delete", created.UUID)
	if r := d.Ctl("secret", "show", created.UUID); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("show after delete: %s", r)
	}
	if fi, err := os.Stat(filepath.Join(d.DataDir, "key-encryption-key.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", fi, err)
	}
	d.Stop()
	for _, f := range []string{"vmeta.db"} {
		b, err := os.ReadFile(filepath.Join(d.DataDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(pass)) {
			t.Errorf("%s holds the passphrase", f)
		}
	}
	if strings.Contains(d.proc.Output(), pass) {
		t.Error("the daemon logged the passphrase")
	}
}
