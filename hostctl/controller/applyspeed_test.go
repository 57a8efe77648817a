package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/virt"
)

// barrierImages lets no Create through until n of them wait at once
// (createDisks makes an instance's plain images at the same time), or
// until wait has passed, which counts as a failure.
type barrierImages struct {
	Images
	n    int
	wait time.Duration

	mu       sync.Mutex
	arrived  int
	all      chan struct{}
	timedOut []string
}

func (b *barrierImages) Create(ctx context.Context, d images.Disk) error {
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-time.After(b.wait):
		b.mu.Lock()
		b.timedOut = append(b.timedOut, filepath.Base(d.Path))
		b.mu.Unlock()
		return fmt.Errorf("%s: the other disks were not being created meanwhile", d.Path)
	}
	return b.Images.Create(ctx, d)
}

// TestCreateDisksAtOnce (issue 23 item 4): the four disk images of a new
// instance are made at the same time, not one qemu-img after the other;
// all four exist after the apply. One after the other, the first Create
// waits for the others in vain and the apply fails.
func TestCreateDisksAtOnce(t *testing.T) {
	e := newEnv(t)
	b := &barrierImages{Images: e.dp().Images, n: 4, wait: 30 * time.Second, all: make(chan struct{})}
	e.dp().Images = b
	if _, err := e.apply(hvSpec); err != nil {
		t.Fatalf("apply: %v (disks that waited alone: %v)", err, b.timedOut)
	}
	for _, d := range []string{"vda", "vdb", "sda", "sdb"} {
		if _, err := os.Stat(filepath.Join(e.c.instanceDir("app-1"), diskFile(d))); err != nil {
			t.Errorf("disk image: %v", err)
		}
	}
}

// defineAfter fails a Define while a disk image is still being made.
type defineAfter struct {
	Domains
	creating *atomic.Int32
}

func (d *defineAfter) Define(ctx context.Context, doc []byte) (virt.Domain, error) {
	if n := d.creating.Load(); n != 0 {
		return virt.Domain{}, fmt.Errorf("define while %d disk images are still being made", n)
	}
	return d.Domains.Define(ctx, doc)
}

// countingImages counts the Creates in progress.
type countingImages struct {
	Images
	creating *atomic.Int32
}

func (i *countingImages) Create(ctx context.Context, d images.Disk) error {
	i.creating.Add(1)
	defer i.creating.Add(-1)
	return i.Images.Create(ctx, d)
}

// TestDisksBeforeDefine: a new instance's disk images are all made (at
// once, TestCreateDisksAtOnce) before its domain is defined, so a hostctl
// killed while qemu-img runs leaves no domain naming files that never
// were; the block-device records name every disk, and a re-apply finds
// nothing to make. (Making them while libvirt defined the domain saved
// ~20 ms of an apply, and left such a domain: test/e2e
// TestDeviceKilledBetweenClaimAndDomain.)
func TestDisksBeforeDefine(t *testing.T) {
	e := newEnv(t)
	var creating atomic.Int32
	e.c.domains = &defineAfter{Domains: e.c.domains, creating: &creating}
	e.dp().Images = &countingImages{Images: e.dp().Images, creating: &creating}
	if _, err := e.apply(hvSpec); err != nil {
		t.Fatalf("apply: %v", err)
	}
	for _, d := range []string{"vda", "vdb", "sda", "sdb"} {
		if _, err := os.Stat(filepath.Join(e.c.instanceDir("app-1"), diskFile(d))); err != nil {
			t.Errorf("disk image: %v", err)
		}
	}
	rec, _, err := e.c.loadBlockDevices(context.Background(), speedUUID(t, e, "app-1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Disks) != 4 {
		t.Errorf("block-device records of %d disks, want 4: %+v", len(rec.Disks), rec.Disks)
	}
	e.mustApply(hvSpec)
}

func speedUUID(t *testing.T, e *env, name string) string {
	t.Helper()
	rec, err := e.st.Instance(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return rec.UUID
}

// TestApplyReadsTheDomainOnce (issue 23 item 4): an apply reads the
// domain's XML once to check what libvirt has and once to read back what
// the define made, and then asks libvirt for the state alone — the shown
// state is the one the read-back domain has (it used to read the XML a
// third time for it); the shown state is still libvirt's.
func TestApplyReadsTheDomainOnce(t *testing.T) {
	e := newEnv(t)
	for _, what := range []string{"new instance", "unchanged re-apply"} {
		from := e.hv.callCount()
		inst := e.mustApply(hvSpec)
		got := e.hv.countCalls(from, "XML", "State")
		if got["XML"] != 2 {
			t.Errorf("%s: %d reads of the domain XML, want 2 (calls %v)", what, got["XML"], e.hv.calls[from:])
		}
		if inst.State != string(virt.StateShutoff) {
			t.Errorf("%s: state %q, want %q", what, inst.State, virt.StateShutoff)
		}
	}
	if _, err := e.c.Start(context.Background(), "app-1"); err != nil {
		t.Fatal(err)
	}
	if inst := e.mustApply(hvSpec); inst.State != string(virt.StateRunning) {
		t.Errorf("re-apply of the running instance: state %q, want %q", inst.State, virt.StateRunning)
	}
}
