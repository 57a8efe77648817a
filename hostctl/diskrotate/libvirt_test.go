package diskrotate

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/testenv"
)

// libvirtSecretsDir is where the system libvirtd (9.0) keeps secret
// values, base64, 0600: the tests read a private secret's value there
// (libvirt's API never hands it back).
const libvirtSecretsDir = "/etc/libvirt/secrets"

// rotFixture is an instance with two LUKS disks (and a plain one) on the
// real libvirtd, over a real store (a bolt file or a Redis server), with
// a pattern written into each encrypted disk.
type rotFixture struct {
	t        *testing.T
	dir, uri string
	storeURL string
	redis    *testenv.RedisServer
	name     string
	uuid     string
	disks    []string // encrypted disks
	patterns map[string]byte
	tool     *encryption.Tool
	prefix   string // this key manager's libvirt secret usage prefix
	// Set by open: the store of the controller it returned.
	st store.Store
	// Optional, for open: the controller's record store wrapped, and the
	// controller's and rotator's logger (nil: discarded).
	wrap  func(store.Records) store.Records
	log   *slog.Logger
	parts []part.Part
}

// forgetFunc is a Forgetter.
type forgetFunc func(ctx context.Context, host, uuid string) error

func (f forgetFunc) ForgetInstance(ctx context.Context, host, uuid string) error {
	return f(ctx, host, uuid)
}

// logger is the fixture's logger.
func (f *rotFixture) logger() *slog.Logger {
	if f.log != nil {
		return f.log
	}
	return slog.New(slog.DiscardHandler)
}

// rotator is the disk rotator of c as the daemon wires it: c's disks
// part, the key manager and the LUKS tool c made its disks with.
func (f *rotFixture) rotator(c *controller.Controller, km *keys.Manager) *Rotator {
	return New(c, f.st, diskPart(c), km, f.tool, f.logger())
}

// diskPart is the disks part registered with c (the fixture's: open).
func diskPart(c *controller.Controller) *disks.Part {
	for _, p := range c.Parts() {
		if dp, ok := p.(*disks.Part); ok {
			return dp
		}
	}
	panic("no disks part")
}

// catalog is the catalog as the daemon wires it, over c's disks part,
// with the key manager km and the LUKS tool.
func catalogOf(c *controller.Controller, km *keys.Manager, luks catalog.ImageVerifier) *catalog.Catalog {
	dp := diskPart(c)
	return catalog.New(catalog.Options{Flavors: &flavors.Registry{Store: dp.Records}, Images: dp.ImageDir(), Secrets: dp,
		Users: catalog.StoreUsers{Instances: dp.Instances.(store.Store)}, Keys: km, LUKS: luks})
}

// instanceBlockDevices is c's instance name and its block-device
// records, as the rotator reads them.
func instanceBlockDevices(ctx context.Context, c *controller.Controller, name string) (*model.Instance, encryption.BlockDevices, error) {
	return New(c, nil, diskPart(c), nil, nil, nil).instanceBlockDevices(ctx, name)
}

func uniqueRotName(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "diskrot-" + hex.EncodeToString(b)
}

// openRot opens a controller over the fixture's store (without its
// reconciler) with a key manager and the qemu-img LUKS tool; the store
// and the connection are closed by the returned function.
func (f *rotFixture) open() (*controller.Controller, *keys.Manager, func()) {
	f.t.Helper()
	ctx := context.Background()
	st, err := storeurl.Open(ctx, f.storeURL, storeurl.WithDataDir(f.dir))
	if err != nil {
		f.t.Fatal(err)
	}
	km, err := keys.Open(ctx, st, f.dir, keys.Options{Host: "local"})
	if err != nil {
		st.Close()
		f.t.Fatal(err)
	}
	conn, err := virt.Connect(ctx, f.uri, virt.ConnOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		st.Close()
		f.t.Fatal(err)
	}
	qemuImg := testenv.LookPath(f.t, "qemu-img")
	imgs := images.New(filepath.Join(f.dir, "images"), images.Options{QemuImg: qemuImg})
	opts := controller.Options{DataDir: f.dir, Logger: f.logger(), Hypervisor: conn, Images: imgs,
		QemuImg: qemuImg, Domain: virt.Options{MemoryMiB: 128}}
	var recs store.Records = st
	if f.wrap != nil {
		opts.Records = f.wrap(st)
		recs = opts.Records
	}
	// The instances' states (shelved, rescued) and the disks part as the
	// daemon wires them.
	vs := vmstate.New(recs, "")
	dp := disks.New(disks.Options{Keys: km, LUKS: f.tool, Secrets: conn, Records: recs, Instances: st, Catalog: imgs,
		DataDir: f.dir, Logger: f.logger()})
	opts.Parts = append([]part.Part{dp, vs}, f.parts...)
	c := controller.New(st, opts)
	vs.Bind(imgs, c, f.logger())
	dp.Bind(c, vs)
	f.st = st
	return c, km, func() { conn.Close(); st.Close() }
}

// newRotFixture makes the instance (defined in libvirt, not started) and
// defines a libvirt secret for each encrypted disk (as after a crash
// between a stop and its secrets' removal: the rotation must update it).
func newRotFixture(t *testing.T, backend string) *rotFixture {
	t.Helper()
	uri := testenv.RequireLibvirt(t)
	f := &rotFixture{t: t, dir: t.TempDir(), uri: uri, name: uniqueRotName(t), disks: []string{"vda", "vdb"},
		patterns: map[string]byte{"vda": 0x5a, "vdb": 0xa5},
		tool:     encryption.New(encryption.Options{QemuImg: testenv.LookPath(t, "qemu-img"), QemuIO: testenv.LookPath(t, "qemu-io"), IterTime: 20 * time.Millisecond})}
	switch backend {
	case "bolt":
		f.storeURL = "bolt://" + filepath.Join(f.dir, "vmeta.db")
	case "redis":
		// Persisted on every write, so a Redis restart is an outage, not
		// a loss of data.
		f.redis = testenv.StartRedisServer(t, "--appendonly", "yes", "--appendfsync", "always")
		f.storeURL = f.redis.URL()
	}
	testenv.CleanupDomain(t, uri, f.name)
	c, km, done := f.open()
	defer done()
	f.prefix = "vmeta/" + km.KeyID() + "/" // as the controller names its libvirt secrets' usages
	t.Cleanup(f.cleanupSecrets)
	inst, err := c.Apply(context.Background(), []byte("name: "+f.name+"\n"+
		"disks: [{name: vda, size: 8M, tag: root, encrypted: true}, {name: vdb, size: 8M, encrypted: true}, {name: vdc, size: 8M}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.uuid = inst.Spec.UUID
	ctx := context.Background()
	for _, bd := range inst.BlockDevices {
		if !bd.Encrypted {
			continue
		}
		pass, err := km.Passphrase(ctx, bd.EncryptionSecretUUID)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := f.qemuIO(bd.Disk, pass, fmt.Sprintf("write -P 0x%x 0 64k", f.patterns[bd.Disk])); err != nil {
			t.Fatalf("write pattern to %s: %v: %s", bd.Disk, err, out)
		}
		if err := f.defineSecret(virt.LibvirtSecret{UUID: bd.EncryptionSecretUUID, Usage: f.prefix + f.uuid + "/" + bd.Disk}, pass); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// defineSecret defines a libvirt secret with its value.
func (f *rotFixture) defineSecret(s virt.LibvirtSecret, value []byte) error {
	ctx := context.Background()
	conn, err := virt.Connect(ctx, f.uri, virt.ConnOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.DefineSecret(ctx, s, value)
}

func (f *rotFixture) cleanupSecrets() {
	ctx := context.Background()
	conn, err := virt.Connect(ctx, f.uri, virt.ConnOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.t.Errorf("clean up libvirt secrets: %v", err)
		return
	}
	defer conn.Close()
	ss, err := conn.Secrets(ctx, f.prefix)
	if err != nil {
		f.t.Errorf("clean up libvirt secrets: %v", err)
		return
	}
	for _, s := range ss {
		if err := conn.UndefineSecret(ctx, s.UUID); err != nil {
			f.t.Errorf("clean up libvirt secret %s: %v", s.UUID, err)
		}
	}
}

func (f *rotFixture) diskPath(disk string) string {
	return filepath.Join(f.dir, "instances", f.name, diskFile(disk))
}

// diskFile is the file of a disk that is not a flavor's (the
// controller's layout).
func diskFile(disk string) string {
	return "disk-" + disk + "." + images.DiskFormat
}

// qemuIO runs a qemu-io command on a disk unlocked with pass (on fd 3).
func (f *rotFixture) qemuIO(disk string, pass []byte, command string) (string, error) {
	args := []string{"--object", "secret,id=s0,file=/dev/fd/3", "--image-opts", "driver=qcow2,file.filename=" + f.diskPath(disk) + ",encrypt.key-secret=s0"}
	if strings.HasPrefix(command, "read") {
		args = append(args, "-r", "-U") // also while QEMU has it open
	}
	cmd := exec.Command(testenv.LookPath(f.t, "qemu-io"), append(args, "-c", command)...)
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer r.Close()
	w.Write(pass)
	w.Close()
	cmd.ExtraFiles = []*os.File{r}
	out, err := cmd.CombinedOutput()
	if err == nil && strings.Contains(string(out), "Pattern verification failed") {
		err = errors.New("pattern verification failed")
	}
	return string(out), err
}

// libvirtSecretValue reads a defined private secret's value from
// libvirtd's secrets directory (ok false: not defined).
func libvirtSecretValue(t *testing.T, uuid string) ([]byte, bool) {
	b, err := os.ReadFile(filepath.Join(libvirtSecretsDir, uuid+".base64"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("read libvirt secret %s: %v", uuid, err)
	}
	v, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("libvirt secret %s: %v", uuid, err)
	}
	return v, true
}

// check returns what is wrong with the disks after a rotation to gen:
// every encrypted disk opens with the passphrase the key manager holds,
// has one active key slot (the one recorded), reads back its pattern, its
// libvirt secret holds that passphrase, nothing is pending, and its
// record is at gen without a journal.
func (f *rotFixture) check(gen int64, wantLibvirt bool) []string {
	f.t.Helper()
	c, km, done := f.open()
	defer done()
	return f.checkWith(c, km, gen, wantLibvirt)
}

// checkRecovered returns what is wrong after start-up recovery alone:
// every encrypted disk opens with the passphrase the key manager holds
// and reads back its pattern, its libvirt secret holds that passphrase,
// and no rotation journal is left (recovery finishes them on a stopped
// instance).
func (f *rotFixture) checkRecovered() []string {
	f.t.Helper()
	ctx := context.Background()
	c, km, done := f.open()
	defer done()
	var bad []string
	_, rec, err := instanceBlockDevices(ctx, c, f.name)
	if err != nil {
		return []string{err.Error()}
	}
	for _, disk := range f.disks {
		bd := rec.Disks[disk]
		if msg := f.checkDisk(ctx, c, km, disk); msg != "" {
			bad = append(bad, "after recovery: "+msg)
		}
		if bd.KeyRotation != nil {
			bad = append(bad, fmt.Sprintf("after recovery: %s: journal %+v left", disk, *bd.KeyRotation))
		}
		pass, err := km.Passphrase(ctx, bd.EncryptionSecretUUID)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		if v, ok := libvirtSecretValue(f.t, bd.EncryptionSecretUUID); !ok || !bytes.Equal(v, pass) {
			bad = append(bad, fmt.Sprintf("after recovery: %s: libvirt secret (defined %t) does not hold the key manager's passphrase", disk, ok))
		}
		clear(pass)
	}
	return bad
}

// checkWith is check through an open controller and key manager.
func (f *rotFixture) checkWith(c *controller.Controller, km *keys.Manager, gen int64, wantLibvirt bool) []string {
	f.t.Helper()
	ctx := context.Background()
	var bad []string
	_, rec, err := instanceBlockDevices(ctx, c, f.name)
	if err != nil {
		return []string{err.Error()}
	}
	for _, disk := range f.disks {
		bd := rec.Disks[disk]
		id := bd.EncryptionSecretUUID
		pass, err := km.Passphrase(ctx, id)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: passphrase: %v", disk, err))
			continue
		}
		if err := f.tool.Verify(ctx, f.diskPath(disk), pass, nil); err != nil {
			bad = append(bad, fmt.Sprintf("%s: the key manager's passphrase does not open it: %v", disk, err))
		}
		if out, err := f.qemuIO(disk, pass, fmt.Sprintf("read -P 0x%x 0 64k", f.patterns[disk])); err != nil {
			bad = append(bad, fmt.Sprintf("%s: pattern: %v: %s", disk, err, out))
		}
		if ok, err := km.HasPending(ctx, id); ok || err != nil {
			bad = append(bad, fmt.Sprintf("%s: pending left (%v)", disk, err))
		}
		if bd.KeyGeneration != gen || bd.KeyRotation != nil || bd.KeySlot == nil {
			bad = append(bad, fmt.Sprintf("%s: record at generation %d (journal %+v, slot %v), want %d and no journal", disk, bd.KeyGeneration, bd.KeyRotation, bd.KeySlot, gen))
		}
		active, err := f.tool.KeySlots(ctx, f.diskPath(disk))
		n := 0
		for _, a := range active {
			if a {
				n++
			}
		}
		if err != nil || n != 1 || bd.KeySlot == nil || !active[*bd.KeySlot] {
			bad = append(bad, fmt.Sprintf("%s: key slots %v (%v), want only the recorded slot %v", disk, active, err, bd.KeySlot))
		}
		v, defined := libvirtSecretValue(f.t, id)
		switch {
		case wantLibvirt && !defined:
			bad = append(bad, fmt.Sprintf("%s: libvirt secret %s gone", disk, id))
		case defined && !bytes.Equal(v, pass):
			bad = append(bad, fmt.Sprintf("%s: libvirt secret %s holds another value than the key manager", disk, id))
		}
		clear(pass)
	}
	return bad
}

// TestDiskRotateRedisOutage: Redis dies in the middle of a rotation (as
// the journal is written, after the pending passphrase was stored); the
// rotation fails, nothing is lost, and once Redis is back (its
// append-only file restored) the same rotation resumes and finishes with
// the same pending passphrase.
func TestDiskRotateRedisOutage(t *testing.T) {
	t.Parallel()
	f := newRotFixture(t, "redis")
	ctx := context.Background()
	var before func(key string)
	f.wrap = func(r store.Records) store.Records {
		return &outageRecords{inner: r, before: func(key string) {
			if before != nil {
				before(key)
			}
		}}
	}
	c, km, done := f.open()
	defer done()
	var pendingBefore []byte
	before = func(key string) {
		if key == "blockdev/"+f.uuid && pendingBefore == nil {
			p, err := km.Pending(ctx, mustSecret(t, c, f.name, "vda"))
			if err != nil {
				t.Errorf("pending before the outage: %v", err)
			}
			pendingBefore = p
			f.redis.Stop()
		}
	}
	r := f.rotator(c, km)
	s := keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: f.uuid, InstanceName: f.name}
	shortCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, err := r.Rotate(shortCtx, s, 2, 0, nil)
	cancel()
	if err == nil {
		t.Fatal("rotation succeeded with Redis down")
	}
	t.Logf("rotation with Redis down: %v", err)
	f.redis.Start()
	// The store client reconnects by itself.
	res, err := r.Rotate(ctx, s, 2, 0, nil)
	if err != nil || !res.Done {
		t.Fatalf("rotation after Redis came back: %+v, %v", res, err)
	}
	if bad := f.checkWith(c, km, 2, true); len(bad) > 0 {
		t.Fatalf("after the outage: %s", strings.Join(bad, "; "))
	}
	now, err := km.Passphrase(ctx, mustSecret(t, c, f.name, "vda"))
	if err != nil || !bytes.Equal(now, pendingBefore) {
		t.Fatal("the resumed rotation minted another passphrase than the one pending before the outage")
	}
}

// outageRecords calls before ahead of every PutRecord.
type outageRecords struct {
	inner  store.Records
	before func(key string)
}

func (o *outageRecords) PutRecord(ctx context.Context, key string, value []byte, expect int64) (store.Record, error) {
	o.before(key)
	return o.inner.PutRecord(ctx, key, value, expect)
}

func (o *outageRecords) Record(ctx context.Context, key string) (store.Record, error) {
	return o.inner.Record(ctx, key)
}

func (o *outageRecords) DeleteRecord(ctx context.Context, key string, expect int64) error {
	return o.inner.DeleteRecord(ctx, key, expect)
}

func (o *outageRecords) Records(ctx context.Context, prefix string) ([]store.Record, error) {
	return o.inner.Records(ctx, prefix)
}

func mustSecret(t *testing.T, c *controller.Controller, name, disk string) string {
	t.Helper()
	_, rec, err := instanceBlockDevices(context.Background(), c, name)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Disks[disk].EncryptionSecretUUID
}

// TestDiskRotateLibvirt: on the real libvirtd and QEMU, a stopped
// instance's disks are rotated, the old passphrases no longer open them
// and the domain starts (QEMU opens both disks with the libvirt secrets
// holding the new passphrases); while it runs a rotation is reported
// pending and changes nothing; after it stops the next call rotates it,
// and it starts again.
func TestDiskRotateLibvirt(t *testing.T) {
	t.Parallel()
	f := newRotFixture(t, "bolt")
	f.cleanupSecrets() // as after a clean stop: no libvirt secret defined
	ctx := context.Background()
	c, km, done := f.open()
	defer done()
	r := f.rotator(c, km)
	subs, err := r.Subjects(ctx)
	if err != nil || len(subs) != 1 || subs[0].InstanceUUID != f.uuid || subs[0].InstanceName != f.name || subs[0].Class != keyrotation.Disk {
		t.Fatalf("Subjects = %+v, %v", subs, err)
	}
	s := subs[0]
	if s.Created.IsZero() || time.Since(s.Created) > time.Hour {
		t.Fatalf("subject created %v: want when its disks were made", s.Created)
	}
	if g, err := r.Generation(ctx, s); err != nil || g != 0 {
		t.Fatalf("Generation before any rotation = %d, %v; want 0", g, err)
	}
	old := map[string][]byte{}
	for _, d := range f.disks {
		old[d], _ = km.Passphrase(ctx, mustSecret(t, c, f.name, d))
	}
	var prog []keyrotation.Progress
	res, err := r.Rotate(ctx, s, 2, 0, func(p keyrotation.Progress) { prog = append(prog, p) })
	if err != nil || !res.Done {
		t.Fatalf("Rotate = %+v, %v", res, err)
	}
	if last := prog[len(prog)-1]; last.Done != 2 || last.Total != 2 {
		t.Fatalf("progress %+v", prog)
	}
	if bad := f.checkWith(c, km, 2, false); len(bad) > 0 {
		t.Fatal(strings.Join(bad, "; "))
	}
	for _, d := range f.disks {
		if err := f.tool.Verify(ctx, f.diskPath(d), old[d], nil); !errors.Is(err, encryption.ErrWrongPassphrase) {
			t.Fatalf("disk %s still opens with its old passphrase: %v", d, err)
		}
	}
	// Again for the same generation: nothing to do.
	if res, err := r.Rotate(ctx, s, 2, 0, nil); err != nil || !res.Done {
		t.Fatalf("second Rotate(2) = %+v, %v", res, err)
	}
	if _, err := c.Start(ctx, f.name); err != nil {
		t.Fatalf("start after rotation (QEMU must open the disks with the new passphrases): %v", err)
	}
	before := map[string][]byte{}
	for _, d := range f.disks {
		before[d], _ = km.Passphrase(ctx, mustSecret(t, c, f.name, d))
		if v, ok := libvirtSecretValue(t, mustSecret(t, c, f.name, d)); !ok || !bytes.Equal(v, before[d]) {
			t.Fatalf("libvirt secret of %s while running does not hold the rotated passphrase", d)
		}
	}
	res, err = r.Rotate(ctx, s, 3, 0, nil)
	if err != nil || res.Done || res.Pending != PendingRunning {
		t.Fatalf("Rotate of a running instance = %+v, %v", res, err)
	}
	for _, d := range f.disks {
		if now, _ := km.Passphrase(ctx, mustSecret(t, c, f.name, d)); !bytes.Equal(now, before[d]) {
			t.Fatalf("disk %s passphrase changed while running", d)
		}
	}
	if _, err := c.Stop(ctx, f.name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Rotate(ctx, s, 3, 0, nil); err != nil || !res.Done {
		t.Fatalf("Rotate after stop = %+v, %v", res, err)
	}
	if bad := f.checkWith(c, km, 3, false); len(bad) > 0 {
		t.Fatal(strings.Join(bad, "; "))
	}
	if g, err := r.Generation(ctx, s); err != nil || g != 3 {
		t.Fatalf("Generation = %d, %v; want 3", g, err)
	}
	if _, err := c.Start(ctx, f.name); err != nil {
		t.Fatalf("start after the second rotation: %v", err)
	}
	if _, err := c.Stop(ctx, f.name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, f.name); err != nil {
		t.Fatal(err)
	}
	if subs, err := r.Subjects(ctx); err != nil || len(subs) != 0 {
		t.Fatalf("Subjects after delete = %+v, %v", subs, err)
	}
}

// checkDisk: the disk opens with the key manager's passphrase and reads
// back its pattern.
func (f *rotFixture) checkDisk(ctx context.Context, c *controller.Controller, km *keys.Manager, disk string) string {
	pass, err := km.Passphrase(ctx, mustSecret(f.t, c, f.name, disk))
	if err != nil {
		return err.Error()
	}
	defer clear(pass)
	if out, err := f.qemuIO(disk, pass, fmt.Sprintf("read -P 0x%x 0 64k", f.patterns[disk])); err != nil {
		return fmt.Sprintf("%s: %v: %s", disk, err, out)
	}
	return ""
}

// TestDiskRotateRecoverRunning: a rotation interrupted after its new
// passphrase was added to a key slot (not yet promoted), and the instance
// started since (QEMU holds the disk: no key slot can change). Recovery
// proves the pending passphrase opens the disk, promotes it and gives the
// libvirt secret the new value, but leaves the key slots; Rotate reports
// the instance pending; after a stop it finishes (old slot erased) and
// the domain starts with the new passphrase.
func TestDiskRotateRecoverRunning(t *testing.T) {
	t.Parallel()
	f := newRotFixture(t, "bolt")
	f.cleanupSecrets()
	ctx := context.Background()
	c, km, done := f.open()
	defer done()
	r := f.rotator(c, km)
	id := mustSecret(t, c, f.name, "vda")
	cur, _ := km.Passphrase(ctx, id)
	pending, err := km.SetPending(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	in, _, err := r.instanceDisks(ctx, keyrotation.Subject{Class: keyrotation.Disk, InstanceName: f.name})
	if err != nil {
		t.Fatal(err)
	}
	_, rec, _ := instanceBlockDevices(ctx, c, f.name)
	bd := rec.Disks["vda"]
	bd.KeyRotation = &encryption.DiskKeyRotation{Generation: 2, Slot: 1}
	if err := diskPart(c).SetBlockDevice(ctx, in, bd); err != nil {
		t.Fatal(err)
	}
	if err := f.tool.AddKeySlot(ctx, f.diskPath("vda"), 1, cur, pending, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, f.name); err != nil {
		t.Fatal(err)
	}
	if err := r.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if now, _ := km.Passphrase(ctx, id); !bytes.Equal(now, pending) {
		t.Fatal("recovery did not promote the pending passphrase that opens the disk")
	}
	if v, ok := libvirtSecretValue(t, id); !ok || !bytes.Equal(v, pending) {
		t.Fatalf("libvirt secret (defined %t) does not hold the promoted passphrase", ok)
	}
	if s, _ := f.tool.KeySlots(ctx, f.diskPath("vda")); !s[0] || !s[1] {
		t.Fatalf("key slots of a running instance's disk changed: %v", s)
	}
	if res, err := r.Rotate(ctx, keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: f.uuid, InstanceName: f.name}, 2, 0, nil); err != nil || res.Done || res.Pending != PendingRunning {
		t.Fatalf("Rotate while running = %+v, %v", res, err)
	}
	if _, err := c.Stop(ctx, f.name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Rotate(ctx, keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: f.uuid, InstanceName: f.name}, 2, 0, nil); err != nil || !res.Done {
		t.Fatalf("Rotate after stop = %+v, %v", res, err)
	}
	if bad := f.checkWith(c, km, 2, false); len(bad) > 0 {
		t.Fatal(strings.Join(bad, "; "))
	}
	if err := f.tool.Verify(ctx, f.diskPath("vda"), cur, nil); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Fatalf("the old passphrase still opens vda: %v", err)
	}
	if _, err := c.Start(ctx, f.name); err != nil {
		t.Fatalf("start with the rotated passphrases: %v", err)
	}
	if _, err := c.Stop(ctx, f.name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// TestDiskRotateFlavorDisks: a flavor's encrypted root, ephemeral and
// swap disks (Nova's file names disk, disk.eph0, disk.swap; the latter two
// over blank templates) rotate like any other, and the domain starts with
// the new passphrases.
func TestDiskRotateFlavorDisks(t *testing.T) {
	t.Parallel()
	f := newRotFixture(t, "bolt")
	ctx := context.Background()
	c, km, done := f.open()
	defer done()
	if _, err := catalogOf(c, km, f.tool).CreateFlavor(ctx, flavors.Flavor{Name: "f.rot", VCPUs: 1, RAM: 128, Disk: 1, Ephemeral: 1, Swap: 16,
		ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "true"}}); err != nil {
		t.Fatal(err)
	}
	name := uniqueRotName(t)
	testenv.CleanupDomain(t, f.uri, name)
	inst, err := c.Apply(ctx, []byte("name: "+name+"\nflavor: f.rot\ndisks: [{name: vda, kind: root, tag: rootfs}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	old := map[string][]byte{}
	for _, bd := range inst.BlockDevices {
		if !bd.Encrypted {
			continue
		}
		for _, d := range inst.Spec.Disks {
			if d.Name == bd.Disk {
				files[bd.Disk], err = diskPart(c).DiskPath(inst.Spec, d.Name)
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		old[bd.Disk], _ = km.Passphrase(ctx, bd.EncryptionSecretUUID)
	}
	if len(files) != 3 {
		t.Fatalf("encrypted flavor disks %v, want root, ephemeral and swap", files)
	}
	r := f.rotator(c, km)
	s := keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: inst.Spec.UUID, InstanceName: name}
	if res, err := r.Rotate(ctx, s, 2, 0, nil); err != nil || !res.Done {
		t.Fatalf("Rotate = %+v, %v", res, err)
	}
	for disk, p := range files {
		pass, _ := km.Passphrase(ctx, mustSecret(t, c, name, disk))
		if err := f.tool.Verify(ctx, p, pass, nil); err != nil {
			t.Errorf("%s (%s): the new passphrase does not open it: %v", disk, filepath.Base(p), err)
		}
		if err := f.tool.Verify(ctx, p, old[disk], nil); !errors.Is(err, encryption.ErrWrongPassphrase) {
			t.Errorf("%s (%s): the old passphrase still opens it: %v", disk, filepath.Base(p), err)
		}
	}
	if g, err := r.Generation(ctx, s); err != nil || g != 2 {
		t.Fatalf("Generation = %d, %v", g, err)
	}
	if _, err := c.Start(ctx, name); err != nil {
		t.Fatalf("start with the rotated flavor disks: %v", err)
	}
	if _, err := c.Stop(ctx, name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// TestDiskRotateOverEncryptedImage: the root disk of an instance from an
// encrypted image is an encrypted overlay; its own passphrase rotates
// (qemu-img amend opens the chain with the instance's copy of the image's
// passphrase), the image's file and passphrase do not (the image is
// shared), the image's data still reads through the overlay, and the
// domain starts.
func TestDiskRotateOverEncryptedImage(t *testing.T) {
	t.Parallel()
	f := newRotFixture(t, "bolt")
	ctx := context.Background()
	c, km, done := f.open()
	defer done()
	imgSec := makeEncryptedImage(t, c, km, "enc-rot", "p1")
	imgPass, _ := km.Passphrase(ctx, imgSec.UUID)
	name := uniqueRotName(t)
	testenv.CleanupDomain(t, f.uri, name)
	inst, err := c.Apply(ctx, []byte("name: "+name+"\nproject_id: p1\nimage: enc-rot\ndisks: [{name: vda, tag: root, encrypted: true}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	bd := inst.BlockDevices[0]
	if bd.BackingEncryptionSecretUUID == "" {
		t.Fatalf("block device %+v: no backing secret", bd)
	}
	overlay := filepath.Join(f.dir, "instances", name, diskFile("vda"))
	info, err := f.tool.Inspect(ctx, overlay)
	if err != nil {
		t.Fatal(err)
	}
	imgSlotsBefore, _ := f.tool.KeySlots(ctx, info.BackingFile)
	old, _ := km.Passphrase(ctx, bd.EncryptionSecretUUID)
	backing, _ := km.Passphrase(ctx, bd.BackingEncryptionSecretUUID)
	r := f.rotator(c, km)
	if res, err := r.Rotate(ctx, keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: inst.Spec.UUID, InstanceName: name}, 2, 0, nil); err != nil || !res.Done {
		t.Fatalf("Rotate = %+v, %v", res, err)
	}
	cur, _ := km.Passphrase(ctx, bd.EncryptionSecretUUID)
	if bytes.Equal(cur, old) {
		t.Fatal("the overlay's passphrase did not change")
	}
	if err := f.tool.Verify(ctx, overlay, cur, backing); err != nil {
		t.Fatalf("the new passphrase does not open the overlay: %v", err)
	}
	if err := f.tool.Verify(ctx, overlay, old, backing); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Fatalf("the old passphrase still opens the overlay: %v", err)
	}
	if now, _ := km.Passphrase(ctx, bd.BackingEncryptionSecretUUID); !bytes.Equal(now, backing) {
		t.Fatal("the backing copy's passphrase changed")
	}
	if err := f.tool.Verify(ctx, info.BackingFile, imgPass, nil); err != nil {
		t.Fatalf("the image no longer opens with its own passphrase: %v", err)
	}
	if s, _ := f.tool.KeySlots(ctx, info.BackingFile); !slices.Equal(s, imgSlotsBefore) {
		t.Fatalf("the image's key slots changed: %v, were %v", s, imgSlotsBefore)
	}
	if out, err := testenv.QemuIO(t, []string{"--object", "secret,id=s0,file=/dev/fd/3", "--object", "secret,id=s1,file=/dev/fd/4", "--image-opts",
		"driver=qcow2,file.filename=" + overlay + ",encrypt.key-secret=s0,backing.encrypt.key-secret=s1", "-r", "-U", "-c", "read -P " + imagePattern + " 0 64k"}, cur, backing); err != nil || strings.Contains(out, "Pattern verification failed") {
		t.Fatalf("the image's data through the rotated overlay: %v: %s", err, out)
	}
	if _, err := c.Start(ctx, name); err != nil {
		t.Fatalf("start after rotating the overlay: %v", err)
	}
	if _, err := c.Stop(ctx, name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// imagePattern is what makeEncryptedImage writes at offset 0 of the
// image, so a read through an overlay shows the backing file was opened.
const imagePattern = "0x5a"

// makeEncryptedImage makes a LUKS qcow2 with the real qemu-img under a
// new key-manager secret of project, writes imagePattern into its first
// 64 KiB, and imports it into c's image catalog as name
// (os_encrypt_key_id naming the secret). It returns the secret.
func makeEncryptedImage(t *testing.T, c *controller.Controller, km *keys.Manager, name, project string) keys.Secret {
	t.Helper()
	ctx := context.Background()
	sec, err := km.Create(ctx, keys.Request{Name: "image-" + name, ProjectID: project})
	if err != nil {
		t.Fatal(err)
	}
	pass, err := km.Passphrase(ctx, sec.UUID)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "src.qcow2")
	tool := encryption.New(encryption.Options{QemuImg: testenv.LookPath(t, "qemu-img"), QemuIO: testenv.LookPath(t, "qemu-io"), IterTime: 10 * time.Millisecond})
	if err := tool.Create(ctx, encryption.Disk{Path: p, Size: "32M"}, pass); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.QemuIO(t, []string{"--object", "secret,id=s0,file=/dev/fd/3", "--image-opts",
		"driver=qcow2,file.filename=" + p + ",encrypt.key-secret=s0", "-c", "write -P " + imagePattern + " 0 64k"}, pass); err != nil {
		t.Fatalf("qemu-io write: %v: %s", err, out)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	img, err := catalogOf(c, km, tool).ImportImage(ctx, name, map[string]string{"os_encrypt_key_id": sec.UUID, "os_encrypt_format": "luks"}, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !img.Encrypted {
		t.Fatalf("imported image not encrypted: %+v", img)
	}
	return sec
}
