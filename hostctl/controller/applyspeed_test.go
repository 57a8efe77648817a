package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
	b := &barrierImages{Images: e.c.images, n: 4, wait: 30 * time.Second, all: make(chan struct{})}
	e.c.images = b
	if _, err := e.apply(hvSpec); err != nil {
		t.Fatalf("apply: %v (disks that waited alone: %v)", err, b.timedOut)
	}
	for _, d := range []string{"vda", "vdb", "sda", "sdb"} {
		if _, err := os.Stat(filepath.Join(e.c.instanceDir("app-1"), diskFile(d))); err != nil {
			t.Errorf("disk image: %v", err)
		}
	}
}

// defineSignal closes defined at the first Define.
type defineSignal struct {
	Domains
	once    sync.Once
	defined chan struct{}
}

func (d *defineSignal) Define(ctx context.Context, doc []byte) (virt.Domain, error) {
	d.once.Do(func() { close(d.defined) })
	return d.Domains.Define(ctx, doc)
}

// imagesAfter lets no Create through before after is closed, or until
// wait has passed, which counts as a failure.
type imagesAfter struct {
	Images
	after chan struct{}
	wait  time.Duration
}

func (i *imagesAfter) Create(ctx context.Context, d images.Disk) error {
	select {
	case <-i.after:
	case <-time.After(i.wait):
		return fmt.Errorf("%s: the domain was not being defined meanwhile", d.Path)
	}
	return i.Images.Create(ctx, d)
}

// TestDisksWhileDefining (issue 23 item 4): a new instance's plain disk
// images are made while libvirt defines its domain (the definition only
// names their files), and the apply waits for them: the images exist, the
// block-device records name them, and a re-apply finds nothing to make.
// Disks made before the define, the first Create waits in vain.
func TestDisksWhileDefining(t *testing.T) {
	e := newEnv(t)
	sig := &defineSignal{Domains: e.c.domains, defined: make(chan struct{})}
	e.c.domains = sig
	e.c.images = &imagesAfter{Images: e.c.images, after: sig.defined, wait: 30 * time.Second}
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
