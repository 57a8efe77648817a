package guest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/guest"
	"github.com/vmeta/vmeta/guest/altname"
	"github.com/vmeta/vmeta/guest/internal/fixture"
	"github.com/vmeta/vmeta/guest/shares"
	"github.com/vmeta/vmeta/guest/source"
	"github.com/vmeta/vmeta/guest/udev"
	"github.com/vmeta/vmeta/guest/uevent"
)

// fakeSource serves a meta_data.json the test changes.
type fakeSource struct {
	mu    sync.Mutex
	doc   string
	err   error
	reads int
}

func (s *fakeSource) set(doc string) {
	s.mu.Lock()
	s.doc, s.err = doc, nil
	s.mu.Unlock()
}

func (s *fakeSource) Fetch(context.Context) (*source.Document, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if s.err != nil {
		return nil, s.err
	}
	d, err := source.Parse([]byte(s.doc))
	if err != nil {
		return nil, err
	}
	d.Origin = "test"
	return d, nil
}

func (s *fakeSource) String() string { return "test source" }

// fakeNet keeps alternative names per interface index.
type fakeNet struct {
	mu    sync.Mutex
	names map[int]string
	alt   map[int][]string
}

func (n *fakeNet) Get(i int) (altname.Link, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name, ok := n.names[i]
	if !ok {
		return altname.Link{}, errors.New("no such device")
	}
	return altname.Link{Index: i, Name: name, AltNames: slices.Clone(n.alt[i])}, nil
}

func (n *fakeNet) Add(i int, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for j, ifname := range n.names {
		if slices.Contains(n.alt[j], name) || ifname == name {
			return fmt.Errorf("add altname %q: file exists", name)
		}
	}
	n.alt[i] = append(n.alt[i], name)
	return nil
}

func (n *fakeNet) Del(i int, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.alt[i] = slices.DeleteFunc(n.alt[i], func(s string) bool { return s == name })
	return nil
}

// fakeMounts is a mount table; tags lists the virtiofs tags the "host"
// offers.
type fakeMounts struct {
	mu     sync.Mutex
	ms     []shares.Mount
	tags   map[string]bool
	mounts int
}

func (m *fakeMounts) Mounts() ([]shares.Mount, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ms), nil
}

func (m *fakeMounts) Mount(tag, dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.tags[tag] {
		return fmt.Errorf("mount: %w", shares.ErrNoTag)
	}
	m.mounts++
	m.ms = append(m.ms, shares.Mount{Source: tag, Target: dir, FSType: "virtiofs"})
	return nil
}

func (m *fakeMounts) Unmount(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.ms) - 1; i >= 0; i-- {
		if m.ms[i].Target == dir {
			m.ms = slices.Delete(m.ms, i, i+1)
			return nil
		}
	}
	return errors.New("not mounted")
}

type env struct {
	t      *testing.T
	tree   *fixture.Tree
	udev   *fixture.Udev
	net    *fakeNet
	mounts *fakeMounts
	src    *fakeSource
	agent  *guest.Agent
	cfg    guest.Config
	vda    string
	log    *bytes.Buffer
}

const shareID = "4b5c6d7e-8f90-4a1b-9c2d-3e4f5a6b7c8d"

// newEnv builds a fixture guest: vda (virtio, partition vda1), vdc
// (virtio), sda (virtio-scsi, serial disk-vol-2352423), sdb (virtio-scsi
// 0:0:2:0, no serial), sr0 (the config drive on AHCI), NICs enp0s3 and
// enp0s4, and a virtiofs device shared-data.
func newEnv(t *testing.T) *env {
	e := &env{t: t, tree: fixture.New(t), log: &bytes.Buffer{}}
	f := e.tree
	e.vda = f.VirtioBlk([]string{"0000:00:07.0"}, 2, "vda", "disk-vol-24235252-0123456789abcdef")
	f.Partition(e.vda, "vda1", 1)
	f.VirtioBlk([]string{"0000:00:09.0"}, 6, "vdc", "vol-enc")
	f.SCSI([]string{"0000:00:05.0"}, 1, 6, 0, 0, 0, "sda", "disk-vol-2352423")
	f.SCSI([]string{"0000:00:05.0"}, 1, 6, 0, 2, 0, "sdb", "")
	f.ATA([]string{"0000:00:1f.2"}, 3, 3, 2, "sr0", "QM00005")
	f.NIC([]string{"0000:00:03.0"}, 0, "enp0s3", "52:54:00:aa:bb:01", 2)
	f.NIC([]string{"0000:00:04.0"}, 4, "enp0s4", "52:54:00:aa:bb:02", 3)
	f.VirtualNIC("lo", "00:00:00:00:00:00", 1)
	f.VirtioFS([]string{"0000:00:08.0"}, 5, "shared-data", false)
	rules := filepath.Join(filepath.Dir(f.Root), "rules.d", "70-vmeta-agent.rules")
	e.udev = fixture.NewUdev(f, rules)
	e.net = &fakeNet{names: map[int]string{1: "lo", 2: "enp0s3", 3: "enp0s4"}, alt: map[int][]string{}}
	e.mounts = &fakeMounts{tags: map[string]bool{"shared-data": true}}
	e.src = &fakeSource{}
	e.cfg = guest.Config{
		Source: e.src, SysRoot: f.Root, DevRoot: f.Dev, RulesFile: rules,
		StateDir: filepath.Join(filepath.Dir(f.Root), "state"), ShareRoot: filepath.Join(filepath.Dir(f.Root), "shares"),
		ShareWait: 50 * time.Millisecond,
		Udev:      e.udev, UdevDB: udev.DB{RunDir: e.udev.RunDir}, AltNames: e.net, Mounter: e.mounts,
		Log: slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	e.agent = guest.New(e.cfg)
	return e
}

func (e *env) apply() *guest.Report {
	e.t.Helper()
	rep, err := e.agent.Apply(context.Background())
	if err != nil {
		e.t.Fatalf("Apply: %v", err)
	}
	return rep
}

// record returns udev's database record of a device.
func (e *env) record(id string) udev.Entry {
	e.t.Helper()
	en, err := udev.DB{RunDir: e.udev.RunDir}.Entry(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return en
}

func (e *env) find(tag, typ string) []string {
	e.t.Helper()
	got, err := guest.Find(tag, guest.FindOptions{Type: typ, SysRoot: e.cfg.SysRoot, DevRoot: e.cfg.DevRoot,
		UdevDB: e.cfg.UdevDB, Mounter: e.mounts, StateDir: e.cfg.StateDir})
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

const doc1 = `{"uuid": "8c3f6a0e-1b2c-4d5e-8f90-123456789abc", "devices": [
 {"type": "nic", "bus": "pci", "address": "0000:00:03.0", "mac": "52:54:00:AA:BB:01", "tags": ["nfvfunc1"]},
 {"type": "nic", "bus": "pci", "address": "0000:00:04.0", "mac": "52:54:00:aa:bb:02", "tags": ["db net"]},
 {"type": "disk", "bus": "pci", "address": "0000:00:07.0", "serial": "disk-vol-24235252-0123456789abcdef", "tags": ["squidcache"], "encrypted": false},
 {"type": "disk", "bus": "scsi", "address": "0:0:0:0", "serial": "disk-vol-2352423", "tags": ["oracledb", "db/primary logs"], "encrypted": true},
 {"type": "disk", "bus": "scsi", "address": "0:0:2:0", "tags": ["by-address"]},
 {"type": "disk", "bus": "pci", "address": "0000:00:09.0", "serial": "vol-enc", "encrypted": true},
 {"type": "disk", "bus": "pci", "address": "0000:00:0a.0", "serial": "not-here", "tags": ["hotplug"]},
 {"type": "gpu", "bus": "pci", "address": "0000:00:0b.0"},
 {"type": "share", "bus": "none", "address": "none", "share_id": "` + shareID + `", "tag": "shared-data"},
 {"type": "share", "bus": "none", "address": "none", "share_id": "` + shareID + `", "tag": "not-attached"}
]}`

func TestApply(t *testing.T) {
	e := newEnv(t)
	e.src.set(doc1)
	rep := e.apply()
	st := rep.State
	t.Logf("changes: %v", rep.Changes)
	t.Logf("problems: %v", st.Problems)

	rules, err := os.ReadFile(e.cfg.RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`ENV{DEVPATH}=="/devices/pci0000:00/0000:00:07.0/virtio2/block/vda", ENV{VMETA_TAGS}="squidcache", SYMLINK+="disk/by-tag/squidcache"`,
		`ENV{VMETA_TAGS}="oracledb db\x2fprimary\x20logs", ENV{VMETA_ENCRYPTED}="1", SYMLINK+="disk/by-tag/oracledb", SYMLINK+="disk/by-tag/db\x2fprimary\x20logs"`,
		`ATTR{address}=="52:54:00:aa:bb:01", KERNELS=="0000:00:03.0", ENV{VMETA_TAGS}="nfvfunc1"`,
	} {
		if !strings.Contains(string(rules), want) {
			t.Errorf("rules lack %s:\n%s", want, rules)
		}
	}

	// udev (the fake evaluates the rules) holds what the rules say.
	vda := e.record("b252:16")
	if vda.Props["VMETA_TAGS"] != "squidcache" || !vda.HasLink("disk/by-tag/squidcache") || vda.Props["VMETA_ENCRYPTED"] != "" {
		t.Errorf("vda: %+v", vda)
	}
	if p := e.record("b252:32"); !p.HasLink("disk/by-tag/squidcache-part1") || p.Props["VMETA_TAGS"] != "squidcache" {
		t.Errorf("vda1: %+v", p)
	}
	if sda := e.record("b8:16"); sda.Props["VMETA_ENCRYPTED"] != "1" || !sda.HasLink(`disk/by-tag/db\x2fprimary\x20logs`) {
		t.Errorf("sda: %+v", sda)
	}
	if sdb := e.record("b8:32"); !sdb.HasLink("disk/by-tag/by-address") {
		t.Errorf("sdb (SCSI by target/lun): %+v", sdb)
	}
	if vdc := e.record("b252:48"); vdc.Props["VMETA_ENCRYPTED"] != "1" || vdc.Props["VMETA_TAGS"] != "" || len(vdc.Links) != 0 {
		t.Errorf("vdc (encrypted, untagged): %+v", vdc)
	}
	if n := e.record("n3"); n.Props["VMETA_TAGS"] != `db\x20net` {
		t.Errorf("enp0s4: %+v", n)
	}
	if sr := e.record("b11:16"); len(sr.Props) != 0 {
		t.Errorf("the config drive got %+v", sr)
	}
	if got := e.net.alt[2]; !slices.Equal(got, []string{"nfvfunc1"}) {
		t.Errorf("enp0s3 altnames %v", got)
	}
	if got := e.net.alt[3]; !slices.Equal(got, []string{`db\x20net`}) {
		t.Errorf("enp0s4 altnames %v", got)
	}
	shareDir := filepath.Join(e.cfg.ShareRoot, "shared-data")
	if got := shares.TagMounts(e.mounts.ms, "shared-data"); !slices.Equal(got, []string{shareDir}) {
		t.Errorf("share mounted at %v", got)
	}

	// What could not be done is reported.
	problems := strings.Join(st.Problems, "\n")
	for _, want := range []string{
		`disk /devices/6 (tags "hotplug"): unmatched: no disk with pci 0000:00:0a.0, serial not-here`,
		`/devices/7: device type "gpu" is not one the agent knows`,
		`share "not-attached"`,
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems lack %q:\n%s", want, problems)
		}
	}
	if !rep.Pending {
		t.Error("a share whose device is missing does not leave the pass pending")
	}

	// find and status.
	for _, c := range []struct{ tag, typ, want string }{
		{"squidcache", "disk", e.tree.Dev + "/vda"},
		{"db/primary logs", "", e.tree.Dev + "/sda"},
		{"nfvfunc1", "nic", "enp0s3"},
		{"db net", "nic", "enp0s4"},
		{"shared-data", "share", shareDir},
		{"nothing", "", ""},
	} {
		if got := strings.Join(e.find(c.tag, c.typ), " "); got != c.want {
			t.Errorf("find --tag %q --type %q = %q, want %q", c.tag, c.typ, got, c.want)
		}
	}
	saved, err := guest.ReadState(e.cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := guest.WriteStatusTable(&table, saved); err != nil {
		t.Fatal(err)
	}
	t.Logf("status:\n%s", table.String())
	for _, want := range []string{"squidcache", "/vda", "enp0s3", shareDir, "mounted", "unmatched", "yes"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("status table lacks %q", want)
		}
	}

	// A second pass changes nothing: same rules, no trigger, no mount.
	triggers, reloads, mounts := len(e.udev.Triggers), e.udev.Reloads, e.mounts.mounts
	rep2 := e.apply()
	if len(rep2.Changes) != 0 || len(e.udev.Triggers) != triggers || e.udev.Reloads != reloads || e.mounts.mounts != mounts {
		t.Errorf("second pass changed %v (triggers %d→%d, reloads %d→%d)", rep2.Changes, triggers, len(e.udev.Triggers), reloads, e.udev.Reloads)
	}
}

func TestApplyChangesAndRemovals(t *testing.T) {
	e := newEnv(t)
	// A share mounted by the admin (fstab) at another place.
	e.mounts.tags["admin-share"] = true
	e.mounts.ms = append(e.mounts.ms, shares.Mount{Source: "admin-share", Target: "/srv/admin", FSType: "virtiofs"})
	e.src.set(strings.Replace(doc1, `"tag": "not-attached"`, `"tag": "admin-share"`, 1))
	e.apply()
	if got := shares.TagMounts(e.mounts.ms, "admin-share"); !slices.Equal(got, []string{"/srv/admin"}) {
		t.Fatalf("a mounted share was mounted again: %v", got)
	}

	// The metadata drops the shares, retags vda, untags enp0s3.
	doc2 := `{"devices": [
 {"type": "nic", "bus": "pci", "address": "0000:00:03.0", "mac": "52:54:00:aa:bb:01"},
 {"type": "nic", "bus": "pci", "address": "0000:00:04.0", "mac": "52:54:00:aa:bb:02", "tags": ["db net"]},
 {"type": "disk", "bus": "pci", "address": "0000:00:07.0", "tags": ["cache2"]},
 {"type": "disk", "bus": "scsi", "address": "0:0:0:0", "serial": "disk-vol-2352423", "tags": ["oracledb", "db/primary logs"], "encrypted": true}
]}`
	e.src.set(doc2)
	before := len(e.udev.Triggers)
	rep := e.apply()
	t.Logf("changes: %v", rep.Changes)
	trig := e.udev.Triggers[before:]
	if len(trig) != 1 {
		t.Fatalf("triggers %v", trig)
	}
	var names []string
	for _, p := range trig[0] {
		names = append(names, filepath.Base(p))
	}
	slices.Sort(names)
	// vda and vda1 retagged, enp0s3 untagged, sdb and vdc lost theirs;
	// sda and enp0s4 are unchanged and not triggered.
	if want := []string{"enp0s3", "sdb", "vda", "vda1", "vdc"}; !slices.Equal(names, want) {
		t.Errorf("triggered %v, want %v", names, want)
	}
	if vda := e.record("b252:16"); vda.Props["VMETA_TAGS"] != "cache2" || vda.HasLink("disk/by-tag/squidcache") || !vda.HasLink("disk/by-tag/cache2") {
		t.Errorf("vda after retag: %+v", vda)
	}
	if n := e.record("n2"); n.Props["VMETA_TAGS"] != "" {
		t.Errorf("enp0s3 keeps %+v", n)
	}
	if got := e.net.alt[2]; len(got) != 0 {
		t.Errorf("enp0s3 keeps altnames %v", got)
	}
	if got := shares.TagMounts(e.mounts.ms, "shared-data"); len(got) != 0 {
		t.Errorf("the agent's share is still mounted at %v", got)
	}
	if got := shares.TagMounts(e.mounts.ms, "admin-share"); len(got) != 1 {
		t.Errorf("the admin's share was unmounted: %v", e.mounts.ms)
	}
}

func TestInvalidMetadataChangesNothing(t *testing.T) {
	e := newEnv(t)
	e.src.set(doc1)
	e.apply()
	rules, _ := os.ReadFile(e.cfg.RulesFile)
	triggers := len(e.udev.Triggers)
	mounts := slices.Clone(e.mounts.ms)
	for _, bad := range []string{
		`<html>500</html>`,
		`{"devices": [{"type": "nic", "bus": "pci"}]}`,
		`{"devices": "all of them"}`,
	} {
		e.src.set(bad)
		if _, err := e.agent.Apply(context.Background()); !errors.Is(err, source.ErrInvalid) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	e.src.mu.Lock()
	e.src.err = errors.New("metadata service: 3 attempts failed: 500 Internal Server Error")
	e.src.mu.Unlock()
	if _, err := e.agent.Apply(context.Background()); err == nil {
		t.Error("a failed read applied")
	}
	after, _ := os.ReadFile(e.cfg.RulesFile)
	if !bytes.Equal(rules, after) || len(e.udev.Triggers) != triggers || !slices.Equal(mounts, e.mounts.ms) {
		t.Error("an unusable document changed the rules, udev or the mounts")
	}
	if vda := e.record("b252:16"); !vda.HasLink("disk/by-tag/squidcache") {
		t.Errorf("vda lost its link: %+v", vda)
	}
	st, err := guest.ReadState(e.cfg.StateDir)
	if err != nil || len(st.Devices) == 0 || !strings.Contains(st.LastError, "500") {
		t.Errorf("state after a failed read: %+v %v", st, err)
	}
}

func TestHotplugAndWeirdTags(t *testing.T) {
	e := newEnv(t)
	e.src.set(doc1)
	e.apply()
	// The disk the metadata listed appears.
	vdd := e.tree.VirtioBlk([]string{"0000:00:0a.0"}, 7, "vdd", "not-here")
	if err := e.udev.Process(vdd); err != nil { // udevd handles its add event
		t.Fatal(err)
	}
	rep := e.apply()
	if r := e.record("b252:64"); !r.HasLink("disk/by-tag/hotplug") {
		t.Errorf("hot-plugged vdd: %+v (changes %v)", r, rep.Changes)
	}

	// Tags that need escaping, one on two disks, one too long.
	long := strings.Repeat("/", 100)
	doc := `{"devices": [
 {"type": "disk", "bus": "pci", "address": "0000:00:07.0", "tags": [".", "a\"b\\c$d%e", "shared"]},
 {"type": "disk", "bus": "pci", "address": "0000:00:09.0", "tags": ["shared", "` + long + `"]}
]}`
	e.src.set(doc)
	rep = e.apply()
	vda := e.record("b252:16")
	if !vda.HasLink(`disk/by-tag/\x2e`) || !vda.HasLink(`disk/by-tag/a\x22b\x5cc\x24d\x25e`) || vda.HasLink("disk/by-tag/shared") {
		t.Errorf("vda: %+v", vda)
	}
	if vda.Props["VMETA_TAGS"] != `\x2e a\x22b\x5cc\x24d\x25e shared` {
		t.Errorf("VMETA_TAGS %q", vda.Props["VMETA_TAGS"])
	}
	if got := udev.SplitTags(vda.Props["VMETA_TAGS"]); !slices.Equal(got, []string{".", `a"b\c$d%e`, "shared"}) {
		t.Errorf("decoded tags %q", got)
	}
	problems := strings.Join(rep.State.Problems, "\n")
	if !strings.Contains(problems, `tag "shared" is on disks vda, vdc`) || !strings.Contains(problems, "too long for a link name") {
		t.Errorf("problems:\n%s", problems)
	}
	if got := e.find("shared", "disk"); len(got) != 2 {
		t.Errorf("find shared: %v (both disks carry the tag)", got)
	}
}

func TestUdevProblems(t *testing.T) {
	e := newEnv(t)
	e.src.set(doc1)
	e.udev.Ignore = true
	rep := e.apply()
	if p := strings.Join(rep.State.Problems, "\n"); !strings.Contains(p, "udev did not apply the rules to") {
		t.Errorf("problems:\n%s", p)
	}
	os.Remove(filepath.Join(e.udev.RunDir, "control"))
	rep = e.apply()
	if p := strings.Join(rep.State.Problems, "\n"); !strings.Contains(p, "udevd is not running") {
		t.Errorf("problems:\n%s", p)
	}
	// find falls back to the state without udev.
	if got := e.find("squidcache", "disk"); !slices.Equal(got, []string{e.tree.Dev + "/vda"}) {
		t.Errorf("find without udev: %v", got)
	}
}

func TestAltNameTaken(t *testing.T) {
	e := newEnv(t)
	e.src.set(`{"devices": [{"type": "nic", "bus": "pci", "mac": "52:54:00:aa:bb:01", "tags": ["enp0s4"]}]}`)
	rep := e.apply()
	if p := strings.Join(rep.State.Problems, "\n"); !strings.Contains(p, "file exists") {
		t.Errorf("an altname that is another interface's name: %s", p)
	}
}

func TestRun(t *testing.T) {
	e := newEnv(t)
	e.src.set(strings.Replace(doc1, `"tag": "not-attached"`, `"tag": "late-share"`, 1))
	events := make(chan uevent.Event, 8)
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.agent.Run(ctx, guest.RunOptions{Events: events, Debounce: 10 * time.Millisecond, PollInterval: time.Hour,
			Ready: func() { close(ready) }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("no first pass; log:\n%s", e.log)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not happen; log:\n%s", what, e.log)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// A hot-plugged disk the metadata already lists.
	vdd := e.tree.VirtioBlk([]string{"0000:00:0a.0"}, 7, "vdd", "not-here")
	events <- uevent.Event{Action: "add", Subsystem: "block", DevPath: vdd}
	waitFor("the link of the hot-plugged disk", func() bool { return e.record("b252:64").HasLink("disk/by-tag/hotplug") })

	// A share whose device comes later is retried.
	e.mounts.mu.Lock()
	e.mounts.tags["late-share"] = true
	e.mounts.mu.Unlock()
	waitFor("the late share", func() bool {
		ms, _ := e.mounts.Mounts()
		return len(shares.TagMounts(ms, "late-share")) == 1
	})

	// New metadata after a media change.
	e.src.set(strings.Replace(doc1, `"squidcache"`, `"renamed"`, 1))
	events <- uevent.Event{Action: "change", Subsystem: "block", DevPath: "/devices/x/block/sr0", Env: map[string]string{"DISK_MEDIA_CHANGE": "1"}}
	waitFor("the retagged disk", func() bool { return e.record("b252:16").HasLink("disk/by-tag/renamed") })

	// Invalid metadata changes nothing.
	e.src.set("garbage")
	events <- uevent.Event{Action: "change", Subsystem: "block", DevPath: "/devices/x/block/sr0", Env: map[string]string{"DISK_MEDIA_CHANGE": "1"}}
	waitFor("the error in the state", func() bool {
		st, err := guest.ReadState(e.cfg.StateDir)
		return err == nil && strings.Contains(st.LastError, "not a JSON object")
	})
	if !e.record("b252:16").HasLink("disk/by-tag/renamed") {
		t.Error("invalid metadata undid the tags")
	}
}

// TestRunRetriesUdev: a pass whose rules udev did not apply (a reload
// racing the trigger under load, seen in the booted guest) leaves the
// pass pending, and the daemon applies again until udev has them —
// without new metadata or a device event.
func TestRunRetriesUdev(t *testing.T) {
	e := newEnv(t)
	// Without the share whose device is missing (that alone keeps a pass
	// pending).
	e.src.set(strings.Replace(doc1, `,
 {"type": "share", "bus": "none", "address": "none", "share_id": "`+shareID+`", "tag": "not-attached"}`, "", 1))
	e.udev.SetIgnore(true)
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.agent.Run(ctx, guest.RunOptions{Events: make(chan uevent.Event), Debounce: 10 * time.Millisecond,
			PollInterval: time.Hour, Ready: func() { close(ready) }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("no first pass; log:\n%s", e.log)
	}
	st, err := guest.ReadState(e.cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(st.Problems, "\n"); !strings.Contains(p, "udev did not apply the rules to") {
		t.Fatalf("first pass problems:\n%s", p)
	}
	e.udev.SetIgnore(false)
	deadline := time.Now().Add(30 * time.Second)
	for !e.record("b252:16").HasLink("disk/by-tag/squidcache") {
		if time.Now().After(deadline) {
			t.Fatalf("udev's rules were never applied again; log:\n%s", e.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunColdplugEvents: the agent starts before udev's coldplug, which
// sends an "add" for every device that is there already (SYNTH_UUID set).
// Such an event makes the daemon check the devices' udev records again
// and trigger the ones that lost their tags, but it reads no metadata: a
// coldplug burst must not cost a read of every transport and the quick
// re-reads a device that came brings.
func TestRunColdplugEvents(t *testing.T) {
	e := newEnv(t)
	e.src.set(strings.Replace(doc1, `,
 {"type": "share", "bus": "none", "address": "none", "share_id": "`+shareID+`", "tag": "not-attached"}`, "", 1))
	events := make(chan uevent.Event, 8)
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.agent.Run(ctx, guest.RunOptions{Events: events, Debounce: 10 * time.Millisecond, PollInterval: time.Hour,
			Ready: func() { close(ready) }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("no first pass; log:\n%s", e.log)
	}
	if !e.record("b252:16").HasLink("disk/by-tag/squidcache") {
		t.Fatalf("first pass: vda has no by-tag link; log:\n%s", e.log)
	}
	e.src.mu.Lock()
	reads := e.src.reads
	e.src.mu.Unlock()
	// vda's record as a coldplug that raced the rules would leave it.
	if err := os.Remove(filepath.Join(e.udev.RunDir, "data", "b252:16")); err != nil {
		t.Fatal(err)
	}
	events <- uevent.Event{Action: "add", Subsystem: "block", DevPath: e.vda, Env: map[string]string{"SYNTH_UUID": "0"}}
	deadline := time.Now().Add(10 * time.Second)
	for !e.record("b252:16").HasLink("disk/by-tag/squidcache") {
		if time.Now().After(deadline) {
			t.Fatalf("the coldplug event did not make the agent check vda's record; log:\n%s", e.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.src.mu.Lock()
	got := e.src.reads
	e.src.mu.Unlock()
	if got != reads {
		t.Errorf("a coldplug event read the metadata again (%d reads, %d before it); log:\n%s", got, reads, e.log)
	}
}
