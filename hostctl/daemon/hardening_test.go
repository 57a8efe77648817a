package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/daemon"
	"github.com/vmeta/vmeta/internal/testenv"
)

// runUntilServing runs the daemon until it serves its admin socket, then
// stops it; it returns the log.
func runUntilServing(t *testing.T, cfg daemon.Config) string {
	return runUntil(t, cfg, -1)
}

// runUntil is runUntilServing that also waits until the daemon lists
// instances instances (any number when negative).
func runUntil(t *testing.T, cfg daemon.Config, instances int) string {
	t.Helper()
	b := daemon.RunInBackground(cfg)
	c := client.NewUnix(cfg.Socket)
	b.WaitFor(t, 30*time.Second, "answer on the admin socket", func() error {
		l, err := c.List(context.Background())
		if err == nil && instances >= 0 && len(l) != instances {
			return fmt.Errorf("%d instances, want %d", len(l), instances)
		}
		return err
	})
	if err := b.Stop(); err != nil {
		t.Fatalf("serve: %v\n%s", err, b.Stderr.String())
	}
	return b.Stderr.String()
}

// TestServeStartupHousekeeping: a config drive left half-built by a
// killed apply (disk.config.staged) is removed at start-up, and a data
// directory open to group or others is tightened to 0700 with a warning.
func TestServeStartupHousekeeping(t *testing.T) {
	dir := t.TempDir()
	cfg := serveConfig(t, dir)
	spec := filepath.Join(dir, "web.json")
	if err := os.WriteFile(spec, []byte(`{"name":"web-1","addresses":["127.0.0.1"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	first := cfg
	first.Apply = []string{spec}
	runUntil(t, first, 1)

	staged := filepath.Join(cfg.DataDir, "instances", "web-1", "disk.config.staged")
	if err := os.WriteFile(staged, []byte("half an ISO"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	log := runUntilServing(t, cfg)
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Errorf("%s after a start: %v; want it removed", staged, err)
	}
	if fi, err := os.Stat(cfg.DataDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory after a start: %v %v; want mode 0700", fi.Mode(), err)
	}
	for _, want := range []string{"data directory was open to group or others: tightened", "was=0755", "removed a config drive left half-built"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestServeStorePassword: hostctl serve takes the store's password from
// --store-password-file or the environment, never needing it on the
// command line; a password in the URL is warned about; none of it is
// logged.
func TestServeStorePassword(t *testing.T) {
	const pw = "s3cret-hostctl-store-pass"
	srv := testenv.StartRedisServer(t, "--requirepass", pw)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "store-password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := serveConfig(t, dir)
	cfg.Store = srv.URL()
	cfg.StorePasswordFile = pwFile
	if log := runUntilServing(t, cfg); strings.Contains(log, pw) {
		t.Errorf("the log holds the password:\n%s", log)
	}

	t.Setenv("VMETA_STORE_PASSWORD", pw)
	cfg.StorePasswordFile = ""
	runUntilServing(t, cfg)

	t.Setenv("VMETA_STORE_PASSWORD", "")
	cfg.Store = "redis://:" + pw + "@" + srv.Addr() + "/0"
	log := runUntilServing(t, cfg)
	if !strings.Contains(log, "every user of this machine can read on the command line") || strings.Contains(log, pw) {
		t.Errorf("a password in the URL: want a warning that does not show it:\n%s", log)
	}

	cfg.Store = srv.URL()
	err := daemon.Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "NOAUTH") || strings.Contains(err.Error(), pw) {
		t.Errorf("without a password: %v", err)
	}
}
