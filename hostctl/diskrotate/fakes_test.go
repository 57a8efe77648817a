package diskrotate

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

// fakeCore is a hand-written Core and Disks: one host's instances, their
// block-device records (kept encoded, as the store keeps them), VM
// states, running domains and defined libvirt secrets.
type fakeCore struct {
	mu      sync.Mutex
	locks   map[string]*sync.Mutex
	specs   map[string]*model.Instance // by name
	records map[string][]byte          // encoded encryption.BlockDevices, by UUID
	states  map[string]string          // VM state, by UUID
	running map[string]bool            // by name
	secrets map[string][]byte          // libvirt secrets defined: value by UUID
}

func newFakeCore() *fakeCore {
	return &fakeCore{locks: map[string]*sync.Mutex{}, specs: map[string]*model.Instance{}, records: map[string][]byte{},
		states: map[string]string{}, running: map[string]bool{}, secrets: map[string][]byte{}}
}

func (c *fakeCore) LockInstance(name string) func() {
	c.mu.Lock()
	l := c.locks[name]
	if l == nil {
		l = &sync.Mutex{}
		c.locks[name] = l
	}
	c.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (c *fakeCore) OwnInstance(_ context.Context, name string) (*model.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.specs[name]
	if !ok {
		return nil, fmt.Errorf("instance %s: %w", name, store.ErrNotFound)
	}
	cp := *in
	cp.Disks = slices.Clone(in.Disks)
	return &cp, nil
}

func (c *fakeCore) BlockDevices(_ context.Context, uuid string) (encryption.BlockDevices, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.decode(uuid)
}

func (c *fakeCore) decode(uuid string) (encryption.BlockDevices, error) {
	b, ok := c.records[uuid]
	if !ok {
		return encryption.BlockDevices{Disks: map[string]encryption.BlockDevice{}}, nil
	}
	return encryption.DecodeBlockDevices(b)
}

func (c *fakeCore) HostBlockDevices(context.Context) (map[string]encryption.BlockDevices, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]encryption.BlockDevices{}
	for uuid := range c.records {
		bds, err := c.decode(uuid)
		if err != nil {
			return nil, err
		}
		out[uuid] = bds
	}
	return out, nil
}

func (c *fakeCore) SetBlockDevice(_ context.Context, in *model.Instance, bd encryption.BlockDevice) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	bds, err := c.decode(in.UUID)
	if err != nil {
		return err
	}
	bds.Instance, bds.Host = in.Name, "local"
	bds.Disks[bd.Disk] = bd
	b, err := encryption.EncodeBlockDevices(bds)
	if err != nil {
		return err
	}
	c.records[in.UUID] = b
	return nil
}

func (c *fakeCore) DiskPath(in *model.Instance, disk string) (string, error) {
	return filepath.Join("/fake/instances", in.Name, "disk-"+disk+".qcow2"), nil
}

func (c *fakeCore) InstanceState(_ context.Context, in *model.Instance) (string, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.states[in.UUID], c.running[in.Name], nil
}

func (c *fakeCore) UpdateLibvirtSecret(_ context.Context, _ *model.Instance, _, id string, pass []byte) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.secrets[id]; !ok {
		return false, nil
	}
	c.secrets[id] = bytes.Clone(pass)
	return true, nil
}

func (c *fakeCore) Instances(context.Context) ([]store.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []store.Instance
	for _, in := range c.specs {
		out = append(out, store.Instance{Name: in.Name, UUID: in.UUID})
	}
	return out, nil
}

func (c *fakeCore) setRunning(name string, running bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[name] = running
}

func (c *fakeCore) libvirtSecret(id string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.secrets[id]
	return bytes.Clone(v), ok
}

// fakeLUKS is a hand-written LUKS: the key slots of each image by path,
// with qemu-img's rules (an active slot is not overwritten, the last one
// is not erased, a passphrase that opens no slot is ErrWrongPassphrase).
// A disk over an encrypted backing file opens only with its passphrase.
type fakeLUKS struct {
	mu    sync.Mutex
	disks map[string]*fakeDisk
}

type fakeDisk struct {
	slots   [encryption.MaxKeySlots][]byte // nil: inactive
	backing []byte                         // the backing file's passphrase (nil: none)
}

func newFakeLUKS() *fakeLUKS { return &fakeLUKS{disks: map[string]*fakeDisk{}} }

// create makes a LUKS image at path opened by pass (slot 0).
func (l *fakeLUKS) create(path string, pass, backing []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := &fakeDisk{backing: bytes.Clone(backing)}
	d.slots[0] = bytes.Clone(pass)
	l.disks[path] = d
}

// setSlot writes a slot directly (a torn amend; nil erases it).
func (l *fakeLUKS) setSlot(path string, slot int, pass []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.disks[path].slots[slot] = bytes.Clone(pass)
}

// open returns the disk at path if pass (and backing) opens it.
func (l *fakeLUKS) open(path string, pass, backing []byte) (*fakeDisk, error) {
	d, ok := l.disks[path]
	if !ok {
		return nil, fmt.Errorf("open %s: no such file", path)
	}
	if d.backing != nil && !bytes.Equal(d.backing, backing) {
		return nil, fmt.Errorf("open %s: backing file: %w", path, encryption.ErrWrongPassphrase)
	}
	for _, s := range d.slots {
		if s != nil && bytes.Equal(s, pass) {
			return d, nil
		}
	}
	return nil, fmt.Errorf("open %s: %w", path, encryption.ErrWrongPassphrase)
}

func (l *fakeLUKS) Verify(_ context.Context, path string, pass, backing []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.open(path, pass, backing)
	return err
}

func (l *fakeLUKS) KeySlots(_ context.Context, path string) ([]bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.disks[path]
	if !ok {
		return nil, fmt.Errorf("qemu-img info %s: no such file", path)
	}
	out := make([]bool, len(d.slots))
	for i, s := range d.slots {
		out[i] = s != nil
	}
	return out, nil
}

func (l *fakeLUKS) AddKeySlot(_ context.Context, path string, slot int, cur, next, backing []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if slot < 0 || slot >= encryption.MaxKeySlots {
		return fmt.Errorf("add key slot to %s: slot %d out of range", path, slot)
	}
	d, err := l.open(path, cur, backing)
	if err != nil {
		return fmt.Errorf("add key slot %d: %w", slot, err)
	}
	if d.slots[slot] != nil {
		return fmt.Errorf("add key slot %d to %s: %w", slot, path, encryption.ErrSlotActive)
	}
	d.slots[slot] = bytes.Clone(next)
	return nil
}

func (l *fakeLUKS) EraseKeySlot(_ context.Context, path string, slot int, keep, backing []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if slot < 0 || slot >= encryption.MaxKeySlots {
		return fmt.Errorf("erase key slot of %s: slot %d out of range", path, slot)
	}
	d, err := l.open(path, keep, backing)
	if err != nil {
		return fmt.Errorf("erase key slot %d: %w", slot, err)
	}
	if d.slots[slot] == nil {
		return nil
	}
	active := 0
	for _, s := range d.slots {
		if s != nil {
			active++
		}
	}
	if active == 1 {
		return fmt.Errorf("erase key slot %d of %s: %w", slot, path, encryption.ErrLastSlot)
	}
	d.slots[slot] = nil
	return nil
}

// fakeFixture is an instance with two encrypted disks (vda, vdb) and a
// plain one over the fake core and LUKS, with the real key manager over a
// bolt store, and a libvirt secret defined for each encrypted disk.
type fakeFixture struct {
	t      *testing.T
	core   *fakeCore
	luks   *fakeLUKS
	km     *keys.Manager
	st     store.Store
	name   string
	uuid   string
	disks  []string
	secret map[string]string // by disk
}

func newFakeFixture(t *testing.T) *fakeFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	km, err := keys.Open(ctx, st, dir, keys.Options{Host: "local"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeFixture{t: t, core: newFakeCore(), luks: newFakeLUKS(), km: km, st: st, name: "vm-1", uuid: "6c0d8a57-2f52-4b8e-9d1f-5c1b3a0e7d21",
		disks: []string{"vda", "vdb"}, secret: map[string]string{}}
	in := &model.Instance{Name: f.name, UUID: f.uuid, Disks: []model.Disk{{Name: "vda", Encrypted: true}, {Name: "vdb", Encrypted: true}, {Name: "vdc"}}}
	f.core.specs[f.name] = in
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, d := range f.disks {
		sec, err := km.Create(ctx, keys.Request{Name: "disk-" + d, ProjectID: "p1"})
		if err != nil {
			t.Fatal(err)
		}
		pass, err := km.Passphrase(ctx, sec.UUID)
		if err != nil {
			t.Fatal(err)
		}
		f.secret[d] = sec.UUID
		f.luks.create(f.path(d), pass, nil)
		f.core.secrets[sec.UUID] = pass
		if err := f.core.SetBlockDevice(ctx, in, encryption.BlockDevice{Disk: d, Encrypted: true, EncryptionSecretUUID: sec.UUID,
			EncryptionFormat: encryption.FormatLUKS, Created: created}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.core.SetBlockDevice(ctx, in, encryption.BlockDevice{Disk: "vdc"}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeFixture) path(disk string) string {
	p, _ := f.core.DiskPath(&model.Instance{Name: f.name}, disk)
	return p
}

// rotator is a rotator over the fixture, as a fresh process has it.
func (f *fakeFixture) rotator() *Rotator {
	return New(f.core, f.core, f.core, f.km, f.luks, slog.New(slog.DiscardHandler))
}

func (f *fakeFixture) subject() keyrotation.Subject {
	return keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: f.uuid, InstanceName: f.name}
}

func (f *fakeFixture) record(disk string) encryption.BlockDevice {
	f.t.Helper()
	bds, err := f.core.BlockDevices(context.Background(), f.uuid)
	if err != nil {
		f.t.Fatal(err)
	}
	return bds.Disks[disk]
}

// checkRecovered returns what is wrong after start-up recovery alone:
// every encrypted disk opens with the passphrase the key manager holds,
// its libvirt secret holds it, and no journal is left.
func (f *fakeFixture) checkRecovered() []string {
	ctx := context.Background()
	var bad []string
	for _, d := range f.disks {
		pass, err := f.km.Passphrase(ctx, f.secret[d])
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		if err := f.luks.Verify(ctx, f.path(d), pass, nil); err != nil {
			bad = append(bad, fmt.Sprintf("after recovery: %s: the key manager's passphrase does not open it: %v", d, err))
		}
		if v, ok := f.core.libvirtSecret(f.secret[d]); !ok || !bytes.Equal(v, pass) {
			bad = append(bad, fmt.Sprintf("after recovery: %s: the libvirt secret does not hold the key manager's passphrase", d))
		}
		if rot := f.record(d).KeyRotation; rot != nil {
			bad = append(bad, fmt.Sprintf("after recovery: %s: journal %+v left", d, *rot))
		}
	}
	return bad
}

// check returns what is wrong after a rotation to gen: every encrypted
// disk opens with the key manager's passphrase and with nothing else (one
// active slot, the one recorded), its libvirt secret holds it, nothing
// is pending, and its record is at gen without a journal.
func (f *fakeFixture) check(gen int64) []string {
	ctx := context.Background()
	var bad []string
	for _, d := range f.disks {
		id := f.secret[d]
		pass, err := f.km.Passphrase(ctx, id)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		if err := f.luks.Verify(ctx, f.path(d), pass, nil); err != nil {
			bad = append(bad, fmt.Sprintf("%s: the key manager's passphrase does not open it: %v", d, err))
		}
		if ok, err := f.km.HasPending(ctx, id); ok || err != nil {
			bad = append(bad, fmt.Sprintf("%s: pending left (%v)", d, err))
		}
		bd := f.record(d)
		if bd.KeyGeneration != gen || bd.KeyRotation != nil || bd.KeySlot == nil {
			bad = append(bad, fmt.Sprintf("%s: record at generation %d (journal %+v, slot %v), want %d and no journal", d, bd.KeyGeneration, bd.KeyRotation, bd.KeySlot, gen))
		}
		active, _ := f.luks.KeySlots(ctx, f.path(d))
		n := 0
		for _, a := range active {
			if a {
				n++
			}
		}
		if n != 1 || bd.KeySlot == nil || !active[*bd.KeySlot] {
			bad = append(bad, fmt.Sprintf("%s: key slots %v, want only the recorded slot %v", d, active, bd.KeySlot))
		}
		if v, ok := f.core.libvirtSecret(id); !ok || !bytes.Equal(v, pass) {
			bad = append(bad, fmt.Sprintf("%s: libvirt secret (defined %t) does not hold the key manager's passphrase", d, ok))
		}
	}
	return bad
}
