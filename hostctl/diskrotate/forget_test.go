package diskrotate_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/hosts/hoststest"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/diskrotate"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

const spec = "name: app-1\n"

// TestDeleteForgetsKeyRotation (issue 20 item 10): an instance's key
// rotation records (its own disk passphrase policy and status) go with
// it, on a plain delete and on a force delete from another host (whose
// records are its owner's), through the Forget part each host's
// controller has registered (as the daemon does).
func TestDeleteForgetsKeyRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	live := &hoststest.Liveness{}
	cs := map[string]*controller.Controller{}
	for _, h := range []string{"host-a", "host-b"} {
		e := keyrotation.New(st, keyrotation.Options{Host: h, Version: "v1.0.0"})
		cs[h] = controller.New(st, controller.Options{DataDir: t.TempDir(), Host: h, Hosts: live,
			Logger: slog.New(slog.DiscardHandler), Parts: []part.Part{diskrotate.NewForget(e)}})
	}
	// The records as the engine of host-a writes them.
	ea := keyrotation.New(st, keyrotation.Options{Host: "host-a", Version: "v1.0.0"})
	records := func(uuid string) []string {
		var out []string
		for _, kind := range []string{"policy", "status"} {
			k := "keyrotation/host-a/" + kind + "/disk-passphrases/" + uuid
			if _, err := st.Record(ctx, k); err == nil {
				out = append(out, k)
			} else if !errors.Is(err, store.ErrNotFound) {
				t.Fatal(err)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		delete func() error
	}{
		{"delete", func() error { return cs["host-a"].Delete(ctx, "app-1") }},
		{"force delete", func() error {
			live.Set("host-a", true)
			defer live.Set("host-a", false)
			_, err := ops.New(cs["host-b"]).ForceDeleteFromStore(ctx, "app-1")
			return err
		}},
	} {
		inst, err := cs["host-a"].Apply(ctx, []byte(spec))
		if err != nil {
			t.Fatal(err)
		}
		s := keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: inst.Spec.UUID, InstanceName: "app-1", Created: time.Now()}
		if _, err := ea.SetPolicy(ctx, s, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 2}); err != nil {
			t.Fatal(err)
		}
		if err := ea.MarkCreated(ctx, s); err != nil {
			t.Fatal(err)
		}
		if got := records(inst.Spec.UUID); len(got) != 2 {
			t.Fatalf("%s: records before %v", tc.name, got)
		}
		if err := tc.delete(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := records(inst.Spec.UUID); len(got) != 0 {
			t.Errorf("%s: key rotation records outlive the instance: %v", tc.name, got)
		}
	}
}
