package disks_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// fakeCore is what the part is wired with, over a bolt store and a real
// key manager in a temporary directory: no hypervisor, no LUKS work, no
// instance lock (the tests run one step at a time); states are the
// states part's records.
type fakeCore struct {
	dir    string
	st     store.Store
	km     *keys.Manager
	states map[string]disks.State
}

func newFakeCore(t *testing.T) *fakeCore {
	t.Helper()
	dir := t.TempDir()
	st := stores.BoltIn(t, dir)
	km, err := keys.Open(context.Background(), st, dir, keys.Options{Host: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	return &fakeCore{dir: dir, st: st, km: km, states: map[string]disks.State{}}
}

func (f *fakeCore) LockInstance(string) func() { return func() {} }
func (f *fakeCore) UnlessRunning(ctx context.Context, _ string, fn func(context.Context) error) error {
	return fn(ctx)
}
func (f *fakeCore) Summaries(context.Context) (map[string]disks.State, error) { return f.states, nil }

var (
	_ disks.Core    = (*fakeCore)(nil)
	_ disks.Holders = (*fakeCore)(nil)
)

// part is the disks part over f's handles, bound to f.
func (f *fakeCore) part() *disks.Part {
	p := disks.New(disks.Options{Keys: f.km, Records: f.st.(store.Records), Instances: f.st,
		Catalog: images.New(filepath.Join(f.dir, "images"), images.Options{}), DataDir: f.dir, Host: "h1",
		Logger: slog.New(slog.DiscardHandler)})
	p.Bind(f, f)
	return p
}

// newSecret creates a secret of project p1 in f's key manager and returns
// its UUID.
func (f *fakeCore) newSecret(t *testing.T) string {
	t.Helper()
	s, err := f.km.Create(context.Background(), keys.Request{ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	return s.UUID
}

// TestReleaseSecretOneRule: a secret goes only when nothing names it —
// a disk's block-device record (any instance's), a rescued instance's
// rescue disk — and a refusal is keys.ErrInUse naming every holder, the
// secret kept.
func TestReleaseSecretOneRule(t *testing.T) {
	ctx := context.Background()
	f := newFakeCore(t)
	p := f.part()
	mk := func() string { return f.newSecret(t) }
	diskSec, rescueSec, free := mk(), mk(), mk()
	web := &model.Instance{Name: "web", UUID: keys.NewUUID()}
	if err := p.UpdateBlockDevices(ctx, nil, web, map[string]*encryption.BlockDevice{
		"vda": {Disk: "vda", Encrypted: true, EncryptionSecretUUID: diskSec, EncryptionFormat: encryption.FormatLUKS},
	}); err != nil {
		t.Fatal(err)
	}
	f.states[keys.NewUUID()] = disks.State{Instance: "db", State: "rescue", RescueImage: "rescue-img", RescueSecret: rescueSec}

	for _, tc := range []struct {
		id, holder string
	}{
		{diskSec, "disk vda of instance web"},
		{rescueSec, "rescue disk of instance db (rescue image rescue-img)"},
	} {
		err := p.ReleaseSecret(ctx, tc.id, "")
		if !errors.Is(err, keys.ErrInUse) || !strings.Contains(err.Error(), tc.holder) {
			t.Errorf("release %s = %v, want ErrInUse naming %q", tc.id, err, tc.holder)
		}
		if _, err := f.km.Get(ctx, tc.id); err != nil {
			t.Errorf("refused release of %s deleted it: %v", tc.id, err)
		}
	}
	if err := p.ReleaseSecret(ctx, free, ""); err != nil {
		t.Fatalf("release of a secret nothing names: %v", err)
	}
	if _, err := f.km.Get(ctx, free); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("released secret still there: %v", err)
	}
	// The disk's record gone, its secret goes too.
	if err := p.UpdateBlockDevices(ctx, nil, web, map[string]*encryption.BlockDevice{"vda": nil}); err != nil {
		t.Fatal(err)
	}
	if err := p.ReleaseSecret(ctx, diskSec, ""); err != nil {
		t.Fatalf("release after the record went: %v", err)
	}
}

// TestToldFromRecords: the guest is told a disk is encrypted exactly when
// its block-device record says so, never from the request.
func TestToldFromRecords(t *testing.T) {
	ctx := context.Background()
	f := newFakeCore(t)
	p := f.part()
	in := &model.Instance{Name: "web", UUID: keys.NewUUID(), Disks: []model.Disk{
		{Name: "vda", Encrypted: true, EncryptionFormat: "luks"}, // requested, never made
		{Name: "vdb"},
		{Name: "vdc", Encrypted: true},
	}}
	if err := p.UpdateBlockDevices(ctx, nil, in, map[string]*encryption.BlockDevice{
		"vdb": {Disk: "vdb", Encrypted: true, EncryptionSecretUUID: keys.NewUUID(), EncryptionFormat: encryption.FormatLUKS},
		"vdc": {Disk: "vdc"},
	}); err != nil {
		t.Fatal(err)
	}
	told, bds, err := p.Told(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range told.Disks {
		got = append(got, fmt.Sprintf("%s=%t%s", d.Name, d.Encrypted, d.EncryptionFormat))
	}
	if want := "vda=false vdb=true vdc=false"; strings.Join(got, " ") != want || len(bds) != 2 {
		t.Errorf("told %q (%d records), want %q (2 records)", got, len(bds), want)
	}
	if !in.Disks[0].Encrypted {
		t.Error("Told changed the instance it was given")
	}
}

// TestAfterDeleteForgetsTheInstance: once the core deleted an instance,
// the part's after-delete phase deletes its disks' secrets that nothing
// else names and its block-device records; a secret another instance's
// disk names stays.
func TestAfterDeleteForgetsTheInstance(t *testing.T) {
	ctx := context.Background()
	f := newFakeCore(t)
	p := f.part()
	mk := func() string { return f.newSecret(t) }
	own, shared := mk(), mk()
	web := &model.Instance{Name: "web", UUID: keys.NewUUID()}
	db := &model.Instance{Name: "db", UUID: keys.NewUUID()}
	enc := func(id string) *encryption.BlockDevice {
		return &encryption.BlockDevice{Encrypted: true, EncryptionSecretUUID: id, EncryptionFormat: encryption.FormatLUKS}
	}
	if err := p.UpdateBlockDevices(ctx, nil, web, map[string]*encryption.BlockDevice{"vda": enc(own), "vdb": enc(shared)}); err != nil {
		t.Fatal(err)
	}
	if err := p.UpdateBlockDevices(ctx, nil, db, map[string]*encryption.BlockDevice{"vda": enc(shared)}); err != nil {
		t.Fatal(err)
	}
	if err := p.AfterDelete(ctx, &part.Instance{Spec: web}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.km.Get(ctx, own); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("the deleted instance's own secret: %v, want it deleted", err)
	}
	if _, err := f.km.Get(ctx, shared); err != nil {
		t.Errorf("a secret another instance names was deleted: %v", err)
	}
	if bds, err := p.BlockDevices(ctx, web.UUID); err != nil || len(bds.Disks) != 0 {
		t.Errorf("block-device records of the deleted instance: %+v, %v", bds, err)
	}
	if bds, err := p.BlockDevices(ctx, db.UUID); err != nil || len(bds.Disks) != 1 {
		t.Errorf("block-device records of the other instance: %+v, %v", bds, err)
	}
}
