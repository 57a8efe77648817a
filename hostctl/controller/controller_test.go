package controller_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/controller"
	drivepart "github.com/vmeta/vmeta/hostctl/parts/configdrive"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

type recorder struct{ uuids []string }

func (r *recorder) Invalidate(uuid string) { r.uuids = append(r.uuids, uuid) }

func newController(t *testing.T) (*controller.Controller, store.Store, *recorder, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rec := &recorder{}
	return controller.New(st, controller.Options{DataDir: dir, Notify: rec, Logger: slog.New(slog.DiscardHandler)}), st, rec, dir
}

const spec = `
name: app-1
addresses: [10.1.0.7]
disks: [{name: vda}, {name: vdb, tag: data, serial: d1}]
nics: [{mac: "52:54:00:00:00:01", tag: front}]
`

func TestApplyPublishesAndRepublishes(t *testing.T) {
	ctx := context.Background()
	c, st, rec, dir := newController(t)
	inst, err := c.Apply(ctx, []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if inst.Spec.UUID == "" || inst.Revision != 1 || inst.DocumentVersion != 1 {
		t.Fatalf("first apply: %+v", inst)
	}
	if got, err := st.LookupAddress(ctx, "10.1.0.7"); err != nil || got != inst.Spec.UUID {
		t.Fatalf("address index: %q, %v", got, err)
	}
	drive := filepath.Join(dir, "instances", "app-1", "disk.config")
	tree, label, err := configdrive.Read(drive)
	if err != nil {
		t.Fatal(err)
	}
	if label != "config-2" {
		t.Errorf("label %q", label)
	}
	if _, ok := tree.Get("openstack/latest/meta_data.json"); !ok {
		t.Error("drive lacks openstack/latest/meta_data.json")
	}

	again, err := c.Apply(ctx, []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if again.Spec.UUID != inst.Spec.UUID || again.Revision != 2 || again.DocumentVersion != 2 {
		t.Fatalf("re-apply: %+v", again)
	}
	if len(rec.uuids) != 2 {
		t.Errorf("publisher told %d times, want 2", len(rec.uuids))
	}
	// The published devices are exactly the tagged ones.
	doc, err := st.Document(ctx, inst.Spec.UUID)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := metadata.DecodeTree(doc.Tree)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := tr.Get("openstack/latest/meta_data.json")
	if !bytes.Contains(md, []byte(`"tags":["data"]`)) || !bytes.Contains(md, []byte(`"tags":["front"]`)) {
		t.Errorf("meta_data.json lacks the tagged devices: %s", md)
	}
}

// Without a hypervisor, config_drive: false publishes the metadata and
// writes no disk.config.
func TestApplyWithoutConfigDrive(t *testing.T) {
	ctx := context.Background()
	c, st, _, dir := newController(t)
	inst, err := c.Apply(ctx, []byte(spec+"config_drive: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "instances", "app-1", "disk.config")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("disk.config: %v, want none", err)
	}
	if inst.ConfigDrive != "" {
		t.Errorf("instance names a config drive %q", inst.ConfigDrive)
	}
	doc, err := st.Document(ctx, inst.Spec.UUID)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := metadata.DecodeTree(doc.Tree)
	if err != nil {
		t.Fatal(err)
	}
	if md, ok := tr.Get("openstack/latest/meta_data.json"); !ok || !bytes.Contains(md, []byte(`"tags":["data"]`)) {
		t.Errorf("published meta_data.json lacks the tagged disk: %s", md)
	}
}

// A refused apply changes nothing: not the store, not the files.
func TestApplyRefusedChangesNothing(t *testing.T) {
	ctx := context.Background()
	c, st, _, dir := newController(t)
	first, err := c.Apply(ctx, []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	drive := filepath.Join(dir, "instances", "app-1", "disk.config")
	before, err := os.ReadFile(drive)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		spec string
		is   error
	}{
		"invalid spec":      {strings.Replace(spec, "tag: front", "tag: a/b", 1), model.ErrInvalidSpec},
		"address conflict":  {strings.Replace(spec, "name: app-1", "name: app-2", 1), store.ErrConflict},
		"uuid mismatch":     {spec + "uuid: 00000000-0000-4000-8000-000000000001\n", store.ErrConflict},
		"second with uuid":  {strings.Replace(spec, "name: app-1", "name: app-3\nuuid: "+first.Spec.UUID, 1), store.ErrConflict},
		"duplicate nic tag": {strings.Replace(spec, `[{mac: "52:54:00:00:00:01", tag: front}]`, `[{mac: "52:54:00:00:00:01", tag: front}, {mac: "52:54:00:00:00:02", tag: front}]`, 1), model.ErrInvalidSpec},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := c.Apply(ctx, []byte(tc.spec))
			if !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			insts, err := st.Instances(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(insts) != 1 || insts[0].Revision != first.Revision {
				t.Fatalf("store changed: %+v", insts)
			}
			after, err := os.ReadFile(drive)
			if err != nil || !bytes.Equal(before, after) {
				t.Fatalf("config drive changed (err %v)", err)
			}
			entries, _ := os.ReadDir(filepath.Join(dir, "instances"))
			if len(entries) != 1 {
				t.Fatalf("instances dir has %d entries, want 1", len(entries))
			}
			files, _ := os.ReadDir(filepath.Join(dir, "instances", "app-1"))
			if len(files) != 1 {
				t.Fatalf("leftover files next to the drive: %v", files)
			}
		})
	}
}

func TestDeleteRemovesEverything(t *testing.T) {
	ctx := context.Background()
	c, st, _, dir := newController(t)
	inst, err := c.Apply(ctx, []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.LookupAddress(ctx, "10.1.0.7"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("address still indexed: %v", err)
	}
	if _, err := st.Document(ctx, inst.Spec.UUID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("document still published: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "instances", "app-1")); !os.IsNotExist(err) {
		t.Errorf("instance directory still there: %v", err)
	}
	if err := c.Delete(ctx, "app-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v, want not found", err)
	}
}

func TestWriteConfigDriveFormats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, _, dir := newController(t)
	if _, err := c.Apply(ctx, []byte(spec)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []configdrive.Format{configdrive.ISO9660, configdrive.VFAT} {
		var buf bytes.Buffer
		n, err := drivepart.NewBuilder(c, c.Documents(), c.DataDir()).WriteConfigDrive(ctx, "app-1", f, &buf)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		p := filepath.Join(t.TempDir(), "drive")
		if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		tree, label, err := configdrive.Read(p)
		if err != nil {
			t.Fatalf("%s: read back: %v", f, err)
		}
		if n != int64(buf.Len()) || !strings.EqualFold(label, "config-2") {
			t.Errorf("%s: n=%d len=%d label=%q", f, n, buf.Len(), label)
		}
		if _, ok := tree.Get("openstack/2018-08-27/meta_data.json"); !ok {
			t.Errorf("%s: missing 2018-08-27 meta_data.json", f)
		}
	}
	// No temporary drives are left in the data directory.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "drive-") {
			t.Errorf("leftover %s", e.Name())
		}
	}
}
