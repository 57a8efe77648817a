package daemon_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/daemon"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/testenv"
	"github.com/vmeta/vmeta/internal/version"
)

// serveUntilKeys starts Run with cfg and waits until the keys resource
// answers; the returned stop ends the daemon and returns Run's error.
func serveUntilKeys(t *testing.T, cfg daemon.Config) (c *client.Client, stop func() error) {
	t.Helper()
	b := daemon.RunInBackground(cfg)
	c = client.NewUnix(cfg.Socket)
	b.WaitFor(t, 60*time.Second, "answer of the keys resource", func() error {
		_, err := c.Keys(context.Background(), "")
		return err
	})
	return c, b.Stop
}

func reportOf(t *testing.T, rs []types.KeyReport, c keyrotation.Class) types.KeyReport {
	t.Helper()
	for _, r := range rs {
		if r.Class == string(c) && r.InstanceUUID == "" {
			return r
		}
	}
	t.Fatalf("no report of %s in %+v", c, rs)
	return types.KeyReport{}
}

// TestServeKeyRotationPolicies (issue 20 items 8, 9, 11): the token
// signing key the daemon creates is generation 1 minted by this version;
// every class is listed, the disk passphrases with "no keys" (no
// instance has any); after a KEK rotation a restart whose --key-rotation
// names WithVersionUpgrade or Disabled starts (they ignore keyGeneration)
// and the policies are switched.
func TestServeKeyRotationPolicies(t *testing.T) {
	testenv.LookPath(t, "qemu-img")
	dir := t.TempDir()
	cfg := serveConfig(t, dir)
	ctx := context.Background()
	c, stop := serveUntilKeys(t, cfg)
	rs, err := c.Keys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(keyrotation.Classes) {
		t.Errorf("%d reports, want one per class: %+v", len(rs), rs)
	}
	tok := reportOf(t, rs, keyrotation.Token)
	if tok.Status.KeyGeneration != 1 || tok.Status.KeyVersion != version.String() || tok.NoKeys != "" {
		t.Errorf("token key created by this start: %+v, want generation 1 minted by %s", tok.Status, version.String())
	}
	if d := reportOf(t, rs, keyrotation.Disk); d.NoKeys == "" {
		t.Errorf("disk passphrases with no instance: %+v, want no keys", d)
	}
	if rot, err := c.RotateKeys(ctx, "disk", ""); err != nil || rot.Subjects != 0 {
		t.Errorf("rotate the disk passphrases of no instance: %+v %v, want nothing to rotate", rot, err)
	}
	for range 2 {
		if _, err := c.RotateKeys(ctx, "kek", ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}

	// Restart naming WithVersionUpgrade and Disabled: accepted.
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var again daemon.Config
	again.AddFlags(fs)
	if err := fs.Parse([]string{"--key-rotation", "kek=WithVersionUpgrade", "--key-rotation", "disk-passphrases=Disabled"}); err != nil {
		t.Fatal(err)
	}
	cfg.KeyRotation.Policies = again.KeyRotation.Policies
	c, stop = serveUntilKeys(t, cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	rs, err = c.Keys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if p := reportOf(t, rs, keyrotation.KEK).Policy; p.KeyRotationPolicy != types.KeyPolicyWithVersionUpgrade {
		t.Errorf("kek policy after the restart: %+v", p)
	}
	if tok := reportOf(t, rs, keyrotation.Token); tok.Status.KeyGeneration != 1 || tok.Status.KeyVersion != version.String() {
		t.Errorf("token key after a restart: %+v", tok.Status)
	}
	// And at run time, both ways.
	for _, p := range []string{types.KeyPolicyDisabled, types.KeyPolicyWithVersionUpgrade} {
		if _, err := c.SetKeyPolicy(ctx, "kek", "", types.KeyPolicy{KeyRotationPolicy: p}); err != nil {
			t.Errorf("kek policy %s after a rotation: %v", p, err)
		}
	}
}
