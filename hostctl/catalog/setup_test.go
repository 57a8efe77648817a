package catalog_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/internal/keylock"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/testenv"
)

// fakeCore is what the daemon wires the catalog with: real registries
// over a bolt store and an image directory, the instances using each
// flavor and image as the test sets them (Users), and the secret rule's
// deletions recorded (Secrets; the rule itself is the disks part's,
// tested in hostctl/parts/disks and hostctl/controller).
type fakeCore struct {
	flavors    *flavors.Registry
	images     *images.Dir
	locks      keylock.Map
	users      map[string][]string // "flavor f" or "image i": instance names
	released   []string            // "secret id, image i" per ReleaseSecret
	releaseErr error
}

func (f *fakeCore) FlavorUsers(_ context.Context, name string) ([]string, error) {
	return f.users["flavor "+name], nil
}

func (f *fakeCore) ImageUsers(_ context.Context, name string) ([]string, error) {
	return f.users["image "+name], nil
}

func (f *fakeCore) ReleaseSecret(_ context.Context, id, image string) error {
	f.released = append(f.released, "secret "+id+", image "+image)
	return f.releaseErr
}

func (f *fakeCore) LockSecret(id string) func() { return f.locks.Lock(id) }

// env is a catalog over a fakeCore, with the real key manager, the real
// LUKS tool (qemu-img) and an audit log in files.
type env struct {
	dir   string
	core  *fakeCore
	keys  *keys.Manager
	audit *events.Log
	cat   *catalog.Catalog
	tool  *encryption.Tool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	qemuImg, qemuIO := testenv.LookPath(t, "qemu-img"), testenv.LookPath(t, "qemu-io")
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	km, err := keys.Open(context.Background(), st, dir, keys.Options{Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	e := &env{dir: dir, keys: km,
		core:  &fakeCore{flavors: &flavors.Registry{Store: st}, images: images.New(filepath.Join(dir, "images"), images.Options{QemuImg: qemuImg}), users: map[string][]string{}},
		audit: events.New(events.NewFiles(filepath.Join(dir, "events")), "h", log),
		tool:  encryption.New(encryption.Options{QemuImg: qemuImg, QemuIO: qemuIO, IterTime: 10 * time.Millisecond}),
	}
	e.cat = catalog.New(catalog.Options{Flavors: e.core.flavors, Images: e.core.images, Users: e.core, Secrets: e.core, Keys: km, LUKS: e.tool, Audit: e.audit, Logger: log})
	return e
}

// listing lists the files of the data directory with their sizes (the
// store's file apart) and the key manager's secrets.
func (e *env) listing(t *testing.T) string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(e.dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "vmeta.db" {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(e.dir, p)
		out = append(out, fmt.Sprintf("%s %s %d", rel, fi.Mode(), fi.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := e.keys.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		out = append(out, "secret "+s.UUID)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// events returns the types of the events of stream, with their payloads.
func (e *env) events(t *testing.T, stream string) []string {
	t.Helper()
	evs, err := e.audit.Read(context.Background(), stream, "", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type+" "+string(ev.Payload))
	}
	return out
}

// luksQcow2 returns a 32 MiB LUKS qcow2 image encrypted under pass, made
// by the real qemu-img.
func (e *env) luksQcow2(t *testing.T, pass []byte) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "src.qcow2")
	if err := e.tool.Create(context.Background(), encryption.Disk{Path: p, Size: "32M"}, pass); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawLUKS returns a 16 MiB raw LUKS file under pass (qemu-img create -f
// luks, the passphrase in a 0600 file).
func rawLUKS(t *testing.T, pass []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	sf := filepath.Join(dir, "pass")
	if err := os.WriteFile(sf, pass, 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "raw.luks")
	testenv.QemuImg(t, "create", "-q", "-f", "luks", "--object", "secret,id=s0,file="+sf,
		"-o", "key-secret=s0,iter-time=10", p, "16M")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
