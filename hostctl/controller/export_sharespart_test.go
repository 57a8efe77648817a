package controller

import (
	"context"
	"os"
	"path/filepath"

	"github.com/vmeta/vmeta/hostctl/images"

	"github.com/vmeta/vmeta/hostctl/part"
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
