package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadAdminKeyringMode: `share ceph-auth` refuses a keyring file
// group or others may read, naming the file and the mode, and reads a
// 0600 one.
func TestReadAdminKeyringMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ceph.client.admin.keyring")
	if err := os.WriteFile(p, []byte("[client.admin]\n\tkey = AQ==\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := readAdminKeyring(p); err == nil || !strings.Contains(err.Error(), "mode 0640") || !strings.Contains(err.Error(), p) {
		t.Fatalf("0640 keyring: %v", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := readAdminKeyring(p); err != nil || !strings.Contains(string(b), "client.admin") {
		t.Fatalf("0600 keyring: %q %v", b, err)
	}
}
