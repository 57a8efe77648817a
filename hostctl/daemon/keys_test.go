package daemon_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/daemon"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/testenv"
)

// serveConfig is a --virt none daemon in dir.
func serveConfig(t *testing.T, dir string) daemon.Config {
	t.Helper()
	var cfg daemon.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.AddFlags(fs)
	sockDir, err := os.MkdirTemp("", "vmeta-keys-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	if err := fs.Parse([]string{"--data-dir", filepath.Join(dir, "data"), "--socket", filepath.Join(sockDir, "hostctl.sock"),
		"--metadata-listen", "127.0.0.1:0", "--virt", "none", "--host", "keys-test", "--heartbeat-interval", "1h", "--host-down-after", "2h"}); err != nil {
		t.Fatal(err)
	}
	cfg.Metadata.TokenKeyFile = daemon.TokenKeyFilePath(cfg.DataDir)
	return cfg
}

// TestServeKeyEncryptionKey: the first start creates the key file (0600)
// and a secret can be stored; the host's heartbeat after the encryption
// probe reports no encryption traits (--virt none makes no disk);
// a start with the key file missing or replaced is refused with an error
// naming it, and the file is not re-created.
func TestServeKeyEncryptionKey(t *testing.T) {
	testenv.LookPath(t, "qemu-img")
	dir := t.TempDir()
	cfg := serveConfig(t, dir)
	b := daemon.RunInBackground(cfg)
	// (The runs below that must fail log beside it.)
	cfg.Stdout, cfg.Stderr = b.Stdout, b.Stderr
	c := client.NewUnix(cfg.Socket)
	var hs []types.HostStatus
	b.WaitFor(t, 60*time.Second, "heartbeat with the host's traits", func() error {
		// The heartbeat after the encryption probe carries the traits.
		if !strings.Contains(b.Stderr.String(), "host traits published") {
			return errors.New(`no "host traits published" logged`)
		}
		var err error
		if hs, err = c.Hosts(context.Background()); err == nil && len(hs) != 1 {
			err = fmt.Errorf("hosts %+v, want one", hs)
		}
		return err
	})
	// --virt none makes no disk: no encryption trait is true here (issue
	// 20, item 6; TestHostTraits covers a host with a hypervisor).
	if len(hs[0].Traits) != 0 {
		t.Errorf("traits under --virt none: %v", hs[0].Traits)
	}
	s, err := c.CreateSecret(context.Background(), types.SecretRequest{ProjectID: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	kek := filepath.Join(cfg.DataDir, keys.KEKFile)
	fi, err := os.Stat(kek)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	orig, _ := os.ReadFile(kek)

	for _, tc := range []struct {
		name  string
		setup func()
		want  string
	}{
		{"missing", func() { os.Remove(kek) }, "is missing, but the store holds secrets"},
		{"replaced", func() {
			os.WriteFile(kek, []byte(strings.Replace(string(orig), `"key_id": "kek-`, `"key_id": "kek-0`, 1)), 0o600)
		}, "is not this host's key file"},
	} {
		tc.setup()
		err := daemon.Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "key-encryption key") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Run = %v", tc.name, err)
		}
		if tc.name == "missing" {
			if _, err := os.Stat(kek); !os.IsNotExist(err) {
				t.Errorf("missing: the key file was re-created")
			}
		}
		os.WriteFile(kek, orig, 0o600)
	}
	// Restored, it starts again and the secret is there.
	b = daemon.RunInBackground(cfg)
	defer b.Stop()
	b.WaitFor(t, 20*time.Second, "secret after restart", func() error {
		got, err := c.Secret(context.Background(), s.UUID)
		if err == nil && got.UUID != s.UUID {
			err = fmt.Errorf("secret %s, want %s", got.UUID, s.UUID)
		}
		return err
	})
}
