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
