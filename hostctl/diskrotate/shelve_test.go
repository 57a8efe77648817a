package diskrotate

import (
	"bytes"
	"context"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
)

// TestDiskRotateShelved: against the real libvirtd and qemu-img, a
// shelved instance's disk passphrases are not rotated (it has no disk
// files; its shelved image is under the root disk's secret): Rotate
// reports it pending and changes no passphrase; after unshelve and stop
// the rotation runs.
func TestDiskRotateShelved(t *testing.T) {
	t.Parallel()
	f := newRotFixture(t, "bolt")
	f.cleanupSecrets()
	ctx := context.Background()
	c, km, done := f.open()
	defer done()
	r := f.rotator(c, km)
	id := mustSecret(t, c, f.name, "vda")
	before, err := km.Passphrase(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ops.New(c).Shelve(ctx, f.name); err != nil {
		t.Fatal(err)
	}
	s := keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: f.uuid, InstanceName: f.name}
	res, err := r.Rotate(ctx, s, 2, 0, nil)
	if err != nil || res.Done || res.Pending != PendingVMState(vmstate.Shelved) {
		t.Fatalf("Rotate while shelved = %+v, %v", res, err)
	}
	if now, _ := km.Passphrase(ctx, id); !bytes.Equal(now, before) {
		t.Fatal("the root disk's passphrase changed while shelved (the shelved image is under it)")
	}
	if _, err := ops.New(c).Unshelve(ctx, f.name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stop(ctx, f.name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Rotate(ctx, s, 2, 0, nil); err != nil || !res.Done {
		t.Fatalf("Rotate after unshelve and stop = %+v, %v", res, err)
	}
	if now, _ := km.Passphrase(ctx, id); bytes.Equal(now, before) {
		t.Error("the passphrase did not rotate after the unshelve")
	}
}
