package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/store"
)

// TestDeleteForgetsKeyRotation (issue 20 item 10): an instance's key
// rotation records (its own disk passphrase policy and status) go with
// it, on a plain delete and on a force delete from another host (whose
// records are its owner's).
func TestDeleteForgetsKeyRotation(t *testing.T) {
	ctx := context.Background()
	cs, st, live := hostControllers(t, "host-a", "host-b")
	for _, h := range []string{"host-a", "host-b"} {
		e := keyrotation.New(st, keyrotation.Options{Host: h, Version: "v1.0.0"})
		cs[h].SetKeyRotationForget(e.ForgetInstance)
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
			live.set("host-a", true)
			defer live.set("host-a", false)
			_, err := cs["host-b"].ForceDeleteFromStore(ctx, "app-1")
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
