package firmware_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/firmware"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// domains is one persistent definition, counting its defines.
type domains struct {
	mu      sync.Mutex
	doc     []byte
	defines int
}

func (d *domains) XML(context.Context, string, bool) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.doc == nil {
		return nil, fmt.Errorf("domain: %w", virt.ErrNotFound)
	}
	return d.doc, nil
}

func (d *domains) Define(_ context.Context, doc []byte) (virt.Domain, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.doc, d.defines = doc, d.defines+1
	return virt.Domain{Name: "app-1", ID: -1}, nil
}

func (d *domains) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.defines
}

func render(t *testing.T, in *model.Instance, rev int64) *metadata.Tree {
	t.Helper()
	tr, err := metadata.Render(in, metadata.Options{Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestNamesAreTheEntries: the names Prepare puts in a definition before
// anything is rendered are those, in that order, of the entries Publish
// writes.
func TestNamesAreTheEntries(t *testing.T) {
	es, err := metadata.FirmwareEntries(render(t, &model.Instance{Name: "app-1", UUID: "5b1f0b5c-3f1a-4c47-9d64-0e0b4e1f5a11"}, 1))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, firmware.Names) {
		t.Errorf("entries %v, Names %v", names, firmware.Names)
	}
}

// TestPublishAfterPrepare: a definition made with what Prepare contributed
// (the entry files of the revision the publish makes, not yet written)
// gets its files from Publish without a second define; a publish that
// changes nothing the entries carry defines nothing and keeps the older
// revision's files; one that changes them redefines once; the transport
// off takes them out. A failed publish's undo removes the files it wrote.
func TestPublishAfterPrepare(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	in := &model.Instance{Name: "app-1", UUID: "5b1f0b5c-3f1a-4c47-9d64-0e0b4e1f5a11"}
	inst := filepath.Join(dir, "instances", "app-1")
	if err := os.MkdirAll(inst, 0o750); err != nil {
		t.Fatal(err)
	}
	hv := &domains{}
	p := firmware.New(hv, dir, true, nil)

	// The apply: Prepare, then the define of what it contributed.
	var c part.Contribution
	if err := p.Prepare(ctx, part.Apply, &part.Instance{Spec: in, Revision: 1}, revert.New(nil, "t"), &c); err != nil {
		t.Fatal(err)
	}
	host := virt.Host{DataDir: dir}
	for _, f := range c.Firmware {
		host.Firmware = append(host.Firmware, virt.FirmwareFile{Name: f.Name, File: f.File})
	}
	doc, err := virt.BuildDomain(in, host, virt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hv.Define(ctx, doc); err != nil {
		t.Fatal(err)
	}
	for _, f := range host.Firmware {
		if _, err := os.Stat(f.File); !os.IsNotExist(err) {
			t.Fatalf("%s before the publish: %v, want none", f.File, err)
		}
	}

	publish := func(tree *metadata.Tree, rev int64) {
		t.Helper()
		r := revert.New(nil, "publish")
		commit, err := p.Publish(ctx, &part.Instance{Spec: in}, tree, rev, r)
		if err != nil {
			t.Fatal(err)
		}
		r.Success()
		commit()
	}
	check := func(what string, tree *metadata.Tree, fwRev int64, defines int) {
		t.Helper()
		if n := hv.count(); n != defines {
			t.Errorf("%s: %d defines, want %d", what, n, defines)
		}
		files, err := virt.FirmwareFiles(hv.doc)
		if err != nil {
			t.Fatal(err)
		}
		if got := virt.FirmwareRevision(files); got != fwRev {
			t.Errorf("%s: the definition names revision %d's entries, want %d's", what, got, fwRev)
		}
		want, err := metadata.FirmwareEntries(tree)
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range files {
			b, err := os.ReadFile(f.File)
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			if want[i].Name == metadata.FirmwareRevision {
				continue // the revision that last changed them
			}
			if !bytes.Equal(b, want[i].Data) {
				t.Errorf("%s: %s holds %q, want %q", what, f.Name, b, want[i].Data)
			}
		}
		ents, _ := os.ReadDir(inst)
		if len(ents) != len(files) {
			t.Errorf("%s: the instance directory has %d files, want the %d entries", what, len(ents), len(files))
		}
	}

	t1 := render(t, in, 1)
	publish(t1, 1)
	check("the apply's publish", t1, 1, 1)
	publish(render(t, in, 2), 2)
	check("an unchanged publish", t1, 1, 1)
	if why := p.Drifted(ctx, &part.Instance{Spec: in}, 2); why != "" {
		t.Errorf("unchanged entries of an older revision are drift: %s", why)
	}

	changed := *in
	changed.Hostname = "other" // not carried: the devices and the uuid are
	changed.NICs = []model.NIC{{MAC: "52:54:00:00:00:01", Tag: "front"}}
	t3 := render(t, &changed, 3)
	publish(t3, 3)
	check("a publish that changes what they carry", t3, 3, 2)

	// A failed publish: its undo puts the definition back and removes
	// the files it wrote.
	changed.NICs[0].Tag = "back"
	r := revert.New(nil, "failed publish")
	if _, err := p.Publish(ctx, &part.Instance{Spec: &changed}, render(t, &changed, 4), 4, r); err != nil {
		t.Fatal(err)
	}
	var err2 error = fmt.Errorf("the store write failed")
	r.Fail(&err2)
	check("after a failed publish", t3, 3, 4)

	off := firmware.New(hv, dir, false, nil)
	if why := off.Drifted(ctx, &part.Instance{Spec: in}, 3); !strings.HasPrefix(why, "firmware entries did not match --firmware-metadata") {
		t.Errorf("entries while the transport is off: drift %q; want the --firmware-metadata reason", why)
	}
	r = revert.New(nil, "off")
	commit, err := off.Publish(ctx, &part.Instance{Spec: in}, t3, 4, r)
	if err != nil {
		t.Fatal(err)
	}
	r.Success()
	commit()
	if files, _ := virt.FirmwareFiles(hv.doc); len(files) != 0 {
		t.Errorf("off: the definition names %+v", files)
	}
	if ents, _ := os.ReadDir(inst); len(ents) != 0 {
		t.Errorf("off: %d files left", len(ents))
	}
}
