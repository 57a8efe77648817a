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
// domain's XML once to check what libvirt has and, when it defined the
// domain or the domain runs, once more to read back the addresses; an
// unchanged re-apply of a domain that is off reads it once (the check's
// definition is what a read back would read). The shown state is then
// libvirt's state alone (it used to read the XML once more for it).
func TestApplyReadsTheDomainOnce(t *testing.T) {
	e := newEnv(t)
	step := func(what string, xmlReads int, state virt.State) {
		t.Helper()
		from := e.hv.callCount()
		inst := e.mustApply(hvSpec)
		if got := e.hv.countCalls(from, "XML")["XML"]; got != xmlReads {
			t.Errorf("%s: %d reads of the domain XML, want %d (calls %v)", what, got, xmlReads, e.hv.calls[from:])
		}
		if inst.State != string(state) {
			t.Errorf("%s: state %q, want %q", what, inst.State, state)
		}
		for _, d := range inst.Spec.Disks {
			if d.Address == "" {
				t.Errorf("%s: disk %s has no address read back", what, d.Name)
			}
		}
	}
	step("new instance", 2, virt.StateShutoff)
	step("unchanged re-apply", 1, virt.StateShutoff)
	if _, err := e.c.Start(context.Background(), "app-1"); err != nil {
		t.Fatal(err)
	}
	// The third: the config-drive part reads the running domain's cdrom
	// to change its medium (hostctl/parts/configdrive).
	step("re-apply of the running instance", 3, virt.StateRunning)
}
