package controller

import (
	"context"
	"os"
	"path/filepath"

	"github.com/vmeta/vmeta/hostctl/images"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// Store is the harness's store.
func (e *env) Store() store.Store { return e.st }

// AddPart registers p with the harness's controller, after the others.
func (e *env) AddPart(p part.Part) { e.c.parts = append(e.c.parts, p) }

// GuestPowerOff shuts the domain of instance name off behind the
// controller's back, as a guest powering itself off does.
func (e *env) GuestPowerOff(name string) {
	e.hv.mu.Lock()
	defer e.hv.mu.Unlock()
	if d, ok := e.hv.domains[name]; ok {
		d.running = false
	}
}

// ImportBlankImage puts a blank qcow2 image of size into the harness's
// image catalog (a rescue image).
func (e *env) ImportBlankImage(name, size string) {
	e.t.Helper()
	p := filepath.Join(e.t.TempDir(), "blank.qcow2")
	if err := images.New(e.t.TempDir(), images.Options{QemuImg: e.qemuImg}).Create(context.Background(), images.Disk{Path: p, Size: size}); err != nil {
		e.t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if _, err := e.c.imageDir.ImportVerified(context.Background(), name, nil, f, nil); err != nil {
		e.t.Fatal(err)
	}
}

// DomainXML is the persistent definition of instance name's domain in the
// fake hypervisor ("" without one).
func (e *env) DomainXML(name string) string {
	e.hv.mu.Lock()
	defer e.hv.mu.Unlock()
	if d, ok := e.hv.domains[name]; ok {
		return d.xml
	}
	return ""
}

// The share service plugged in through ShareHooks until it became a part
// (hostctl/shares). A test written against those hooks (devicestart_test.go:
// failingMounts) installs them with SetShareHooks, which registers them as
// a part: PrepareStart is its BeforeStart, StartDone(nil) its AfterStart,
// Stopped its AfterStop, Deleted its AfterDelete.

// ShareApply is what an apply told the share hooks.
type ShareApply struct {
	Shares []model.Share
}

// shareHooks are the old share hooks.
type shareHooks interface {
	SpecShares(ctx context.Context, a ShareApply) ([]model.Share, func(error), error)
	PrepareStart(ctx context.Context, uuid string) error
	StartDone(ctx context.Context, uuid string, err error)
	Stopped(ctx context.Context, uuid string)
	Deleted(ctx context.Context, uuid string)
	Refuse(ctx context.Context, uuid, op string) error
}

// SetShareHooks registers h as a part of c.
func (c *Controller) SetShareHooks(h shareHooks) { c.parts = append(c.parts, hooksPart{h}) }

// hooksPart is the part old share hooks make.
type hooksPart struct{ h shareHooks }

var _ part.Starter = hooksPart{}

func (hooksPart) Name() string { return "share-hooks" }
func (hooksPart) Answers() part.Answers {
	a := part.Answers{}
	for _, op := range part.Ops() {
		a[op] = part.Answer{Do: part.Nothing}
	}
	return a
}
func (hooksPart) Check(context.Context, part.Op, *part.Instance) error { return nil }
func (hooksPart) Prepare(context.Context, part.Op, *part.Instance, *revert.Reverter, *part.Contribution) error {
	return nil
}
func (hooksPart) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }
func (p hooksPart) BeforeStart(ctx context.Context, in *part.Instance, r *revert.Reverter) error {
	if err := p.h.PrepareStart(ctx, in.Spec.UUID); err != nil {
		return err
	}
	r.Add("start failed", func(ctx context.Context) error { p.h.StartDone(ctx, in.Spec.UUID, errStartFailed); return nil })
	return nil
}
func (p hooksPart) AfterStart(ctx context.Context, in *part.Instance) error {
	p.h.StartDone(ctx, in.Spec.UUID, nil)
	return nil
}
func (p hooksPart) AfterStop(ctx context.Context, in *part.Instance) error {
	p.h.Stopped(ctx, in.Spec.UUID)
	return nil
}
func (p hooksPart) AfterDelete(ctx context.Context, in *part.Instance) error {
	p.h.Deleted(ctx, in.Spec.UUID)
	return nil
}

// errStartFailed is what StartDone hears of a start that failed.
var errStartFailed = errorString("the start failed")

type errorString string

func (e errorString) Error() string { return string(e) }
