package shares

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/testenv"
)

var admin = types.Principal{Name: "local", Role: types.RoleAdmin}

// recorder is a Runner that records the commands and answers from a
// script (the unit tests of the NFS path: this machine's kernel has no
// NFS client, see mounts_test.go). It keeps a mountinfo file in step with
// the mounts it pretends to make.
type recorder struct {
	mu        sync.Mutex
	calls     []string
	fail      map[string]string // command prefix -> output of a failure
	mountinfo string
}

func (r *recorder) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := name + " " + strings.Join(args, " ")
	r.calls = append(r.calls, line)
	for prefix, out := range r.fail {
		if strings.HasPrefix(line, prefix) {
			return []byte(out), fmt.Errorf("exit status 32")
		}
	}
	if r.mountinfo == "" {
		return nil, nil
	}
	b, _ := os.ReadFile(r.mountinfo)
	switch name {
	case "mount":
		dir := args[len(args)-1]
		b = append(b, fmt.Sprintf("99 1 0:99 / %s rw,relatime - nfs4 %s rw\n", dir, args[len(args)-2])...)
	case "umount":
		var keep []string
		for _, l := range strings.SplitAfter(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[4] == args[0] {
				continue
			}
			keep = append(keep, l)
		}
		b = []byte(strings.Join(keep, ""))
	}
	return nil, os.WriteFile(r.mountinfo, b, 0o600)
}

func (r *recorder) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// env is a share service over a real store and a real controller
// without a hypervisor, whose instances the service sees SHUTOFF (the
// state a share is attached in: the controller itself has no state
// without a hypervisor, and an attach there is refused, which rawState
// shows); the libvirt tests use one with libvirt.
type env struct {
	t      *testing.T
	st     store.Store
	ctl    *controller.Controller
	svc    *Service
	root   string
	run    *recorder
	events store.Streams
	logs   *bytes.Buffer
	inst   Instances
	// rawState: the service sees the controller's own state ("" without
	// a hypervisor) instead of SHUTOFF.
	rawState bool
}

// stores are the backends every share test runs on.
func stores(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"bolt": func(t *testing.T) store.Store {
			b, err := bolt.Open(filepath.Join(t.TempDir(), "vmeta.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		"redis": func(t *testing.T) store.Store {
			url := testenv.StartRedis(t)
			st, err := storeurl.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
}

type syncBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.String()
}

func newEnv(t *testing.T, st store.Store) *env {
	t.Helper()
	return newEnvWith(t, st, nil)
}

// newEnvWith is newEnv with the controller's options adjusted by opts
// (a hypervisor).
func newEnvWith(t *testing.T, st store.Store, opts func(dir string, o *controller.Options), more ...func(st store.Store, o *controller.Options)) *env {
	t.Helper()
	dir := t.TempDir()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	e := &env{t: t, st: st, root: filepath.Join(dir, "shares"), logs: &logs.Buffer}
	if err := os.MkdirAll(e.root, 0o755); err != nil {
		t.Fatal(err)
	}
	e.run = &recorder{mountinfo: filepath.Join(dir, "mountinfo")}
	if err := os.WriteFile(e.run.mountinfo, []byte("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := controller.Options{DataDir: dir, Logger: log, Host: "host-a"}
	if opts != nil {
		opts(dir, &o)
	}
	for _, f := range more {
		f(st, &o)
	}
	// The service is a part of the controller: made first, it sees the
	// controller through instancesFunc.
	streams := events.For(st, filepath.Join(dir, "events"))
	e.events = streams
	var support func(context.Context) (virt.ShareSupport, error)
	if hv, ok := o.Hypervisor.(interface {
		ShareSupport(context.Context, virt.DomainType, string) (virt.ShareSupport, error)
	}); ok {
		support = func(ctx context.Context) (virt.ShareSupport, error) {
			return hv.ShareSupport(ctx, o.Domain.Type, o.Domain.Machine)
		}
	}
	e.svc = New(st, instancesFunc{e}, Options{Host: "host-a", ShareRoot: e.root, Runner: e.run, Logger: log,
		Events: events.New(streams, "host-a", log), MountInfo: e.run.mountinfo, ReconcileInterval: -1, Support: support})
	records, _ := st.(store.Records) // the controller's, as controller.New takes them
	if o.Records != nil {
		records = o.Records
	}
	// The disks part, as the daemon wires it (no key manager here).
	var secrets disks.LibvirtSecrets
	if s, ok := o.Hypervisor.(disks.LibvirtSecrets); ok {
		secrets = s
	}
	o.Images = images.New(filepath.Join(dir, "images"), images.Options{QemuImg: o.QemuImg})
	dp := disks.New(disks.Options{LUKS: encryption.New(encryption.Options{QemuImg: o.QemuImg}), Secrets: secrets,
		Records: records, Instances: st, Catalog: o.Images, DataDir: dir, Host: "host-a", Logger: log})
	o.Parts = append(append([]part.Part{dp}, o.Parts...), e.svc, faults.New(records, log)) // as the daemon registers them
	e.ctl = controller.New(st, o)
	dp.Bind(e.ctl, nil)
	e.inst = liveCtl{e.ctl, ops.NewLiveDevices(e.ctl)} // as the daemon's shareCore
	t.Cleanup(func() { e.svc.Close() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	})
	return e
}

// liveCtl is the controller with the live device changes of hostctl/ops
// (the daemon's shareCore).
type liveCtl struct {
	*controller.Controller
	*ops.LiveDevices
}

// instancesFunc lets a test swap the controller the service sees.
type instancesFunc struct{ e *env }

func (f instancesFunc) DomainState(ctx context.Context, name string) (string, error) {
	state, err := f.e.inst.DomainState(ctx, name)
	if err == nil && state == "" && !f.e.rawState {
		state = "shutoff"
	}
	return state, err
}

func (f instancesFunc) Reapply(ctx context.Context, in *model.Instance) error {
	return f.e.inst.Reapply(ctx, in)
}

func (f instancesFunc) Capabilities() (hypervisor, records bool) { return f.e.inst.Capabilities() }

func (f instancesFunc) LiveXML(ctx context.Context, name string) ([]byte, error) {
	lc, ok := f.e.inst.(LiveCore)
	if !ok {
		return nil, fmt.Errorf("no live attach in this test")
	}
	return lc.LiveXML(ctx, name)
}

func (f instancesFunc) ChangeLive(ctx context.Context, op, name string, plan func(*model.Instance, []byte) (part.LiveDevice, error)) ([]string, error) {
	lc, ok := f.e.inst.(LiveCore)
	if !ok {
		return nil, fmt.Errorf("no live attach in this test")
	}
	return lc.ChangeLive(ctx, op, name, plan)
}

// stateOverride reports a fixed domain state for every instance.
type stateOverride struct {
	Instances
	state string
}

func (s stateOverride) DomainState(ctx context.Context, name string) (string, error) {
	if _, err := s.Instances.DomainState(ctx, name); err != nil {
		return "", err
	}
	return s.state, nil
}

// instance applies an instance and returns its UUID.
func (e *env) instance(name, project string) string {
	e.t.Helper()
	spec := "name: " + name + "\n"
	if project != "" {
		spec += "project_id: " + project + "\n"
	}
	inst, err := e.ctl.Apply(context.Background(), []byte(spec))
	if err != nil {
		e.t.Fatal(err)
	}
	return inst.Spec.UUID
}

// localShare creates a local share of a fresh directory under the root.
func (e *env) localShare(project string) string {
	e.t.Helper()
	dir, err := os.MkdirTemp(e.root, "data-")
	if err != nil {
		e.t.Fatal(err)
	}
	sh, err := e.svc.CreateShare(context.Background(), admin, types.ShareCreateRequest{ProjectID: project, Proto: types.ShareProtoLocal, ExportLocation: dir})
	if err != nil {
		e.t.Fatal(err)
	}
	return sh.ID
}

func (e *env) nfsShare(project, export string) string {
	e.t.Helper()
	sh, err := e.svc.CreateShare(context.Background(), admin, types.ShareCreateRequest{ProjectID: project, Proto: types.ShareProtoNFS, ExportLocation: export})
	if err != nil {
		e.t.Fatal(err)
	}
	return sh.ID
}

// snapshot is every record, instance and published document, to show
// that a refused request changed nothing.
func (e *env) snapshot() string {
	e.t.Helper()
	ctx := context.Background()
	var b strings.Builder
	recs, err := e.st.Records(ctx, "")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range recs {
		if strings.HasPrefix(r.Key, "host/") {
			continue
		}
		fmt.Fprintf(&b, "record %s v%d %s\n", r.Key, r.Version, r.Value)
	}
	insts, err := e.st.Instances(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, in := range insts {
		v, _ := e.st.DocumentVersion(ctx, in.UUID)
		fmt.Fprintf(&b, "instance %s rev %d doc %d %s\n", in.Name, in.Revision, v, in.Spec)
	}
	fmt.Fprintf(&b, "mounts %q\n", e.run.Calls())
	return b.String()
}

func (e *env) mapping(uuid, share string) (Mapping, bool) {
	e.t.Helper()
	m, err := loadMapping(context.Background(), e.st, uuid, share)
	if err != nil {
		return Mapping{}, false
	}
	return m, true
}

func (e *env) share(id string) Share {
	e.t.Helper()
	sh, err := loadShare(context.Background(), e.st, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return sh
}

// devices are the share devices the guest sees at version v.
func (e *env) devices(uuid, v string) []metadata.Device {
	e.t.Helper()
	doc, err := e.st.Document(context.Background(), uuid)
	if err != nil {
		e.t.Fatal(err)
	}
	tree, err := metadata.DecodeTree(doc.Tree)
	if err != nil {
		e.t.Fatal(err)
	}
	raw, ok := tree.Get("openstack/" + v + "/meta_data.json")
	if !ok {
		e.t.Fatalf("no meta_data.json at %s", v)
	}
	var md struct {
		Devices []metadata.Device `json:"devices"`
	}
	if err := json.Unmarshal(raw, &md); err != nil {
		e.t.Fatal(err)
	}
	var out []metadata.Device
	for _, d := range md.Devices {
		if d.Type == "share" {
			out = append(out, d)
		}
	}
	return out
}

// events returns the share events so far.
func (e *env) shareEvents() []events.Event {
	e.t.Helper()
	evs, err := events.Read(context.Background(), e.events, Stream, "", 100, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
