package diskrotate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/store"
)

// TestDiskRotateClassWide (issue 20 item 7): `hostctl keys rotate
// disk-passphrases` with no instance named, as the daemon wires it, on a
// fresh instance (its disks made at generation 1, no class status ever
// written) asks for generation 2 and the next run re-keys every
// encrypted disk (real qemu-img LUKS disks and libvirt secrets). The
// instance's key rotation records go when it is deleted (item 10).
func TestDiskRotateClassWide(t *testing.T) {
	t.Parallel()
	f := newRotFixture(t, "bolt")
	f.cleanupSecrets()
	ctx := context.Background()
	// As the daemon registers it: the part that deletes a deleted
	// instance's key rotation records (the engine is made below).
	var e *keyrotation.Engine
	f.parts = []part.Part{NewForget(forgetFunc(func(ctx context.Context, host, uuid string) error {
		return e.ForgetInstance(ctx, host, uuid)
	}))}
	c, km, done := f.open()
	defer done()
	// The host began tracking key status before the instance was made
	// (as a daemon does at its first start): its disks are generation 1.
	e = keyrotation.New(f.st, keyrotation.Options{Host: "local", Version: "v1.0.0",
		Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	e.Register(keyrotation.Disk, f.rotator(c, km))
	if err := e.Run(ctx); err != nil { // first sight: generation 1
		t.Fatal(err)
	}
	s := keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: f.uuid, InstanceName: f.name}
	if st, err := e.Status(ctx, s); err != nil || st.KeyGeneration != 1 {
		t.Fatalf("status of the fresh instance = %+v, %v, want generation 1", st, err)
	}
	rot, err := e.Rotate(ctx, keyrotation.Subject{Class: keyrotation.Disk})
	if err != nil || rot.KeyGeneration != 2 || rot.Subjects != 1 {
		t.Fatalf("class-wide rotate = %+v, %v, want generation 2 of 1 instance", rot, err)
	}
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := e.Status(ctx, s); err != nil || st.KeyGeneration != 2 || st.Pending != "" || st.Error != "" {
		t.Fatalf("status after the run = %+v, %v", st, err)
	}
	if bad := f.checkWith(c, km, 2, false); len(bad) > 0 {
		t.Fatal(strings.Join(bad, "; "))
	}

	if err := c.Delete(ctx, f.name); err != nil {
		t.Fatal(err)
	}
	recs, err := f.st.Records(ctx, "keyrotation/")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if strings.Contains(r.Key, f.uuid) {
			t.Errorf("%s outlives the instance", r.Key)
		}
	}
	if _, err := f.st.Record(ctx, "keyrotation/local/policy/disk-passphrases"); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	} else if err != nil {
		t.Error("the class policy went with the instance")
	}
}
