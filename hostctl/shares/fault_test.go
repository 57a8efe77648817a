package shares

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestLibvirtMountFailureError: an instance (a real domain in libvirtd)
// whose start fails because its NFS share cannot be mounted is in
// ERROR, on bolt and on Redis. The mount is the real mount(8): this
// machine's kernel has no NFS client, so mount.nfs fails ("No such
// device"); on a kernel with one, mount is made to fail the same way
// through the test runner. Then: Get and List show state error with a
// fault naming the share and never the export; a plain start is refused
// (ErrState, 409) asking for a hard reboot, and so is a soft reboot; a
// hard reboot whose mount fails again leaves it in ERROR; the share can
// be detached while in ERROR (the specification: SHUTOFF or ERROR); a
// fresh controller over the same store still sees ERROR; the hard
// reboot then starts the domain and clears ERROR; a later stop and plain
// start work.
func TestLibvirtMountFailureError(t *testing.T) {
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			e, uri := libvirtEnvOn(t, backend)
			ctx := context.Background()
			if err := e.svc.checkSupport(ctx); err != nil {
				t.Fatalf("this host's libvirt (domain capabilities): %v", err)
			}
			const export = "127.0.0.1:/vmeta-export"
			if kernelHasNFS() {
				e.run.fail = map[string]string{"mount ": "mount.nfs: access denied by server while mounting " + export}
			} else {
				testenv.LookPath(t, "mount.nfs")
				e.svc.mounts.run = ExecRunner{}
				e.svc.mounts.mountinfo = "/proc/self/mountinfo"
			}
			name := domainName(t, uri)
			u := e.instance(name, "demo")
			id := e.nfsShare("demo", export)
			e.attach(name, id)

			_, err := e.ctl.Start(ctx, name)
			if !errors.Is(err, part.ErrMountFailed) || strings.Contains(err.Error(), export) {
				t.Fatalf("start with a failing mount: %v (want ErrMountFailed, without the export)", err)
			}
			wantError := func(where string) {
				t.Helper()
				inst, err := e.ctl.Get(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if inst.State != controller.StateError || !strings.Contains(inst.Fault, id) || strings.Contains(inst.Fault, export) {
					t.Errorf("%s: get: state %q fault %q; want error naming share %s, without the export", where, inst.State, inst.Fault, id)
				}
				list, err := e.ctl.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, in := range list {
					if in.Spec.Name == name && (in.State != controller.StateError || in.Fault != inst.Fault) {
						t.Errorf("%s: list: state %q fault %q", where, in.State, in.Fault)
					}
				}
				if st := strings.TrimSpace(virsh(t, uri, "domstate", name)); st != "shut off" {
					t.Errorf("%s: domain %s", where, st)
				}
			}
			wantError("after the failed start")
			if m, _ := e.mapping(u, id); m.Status != types.ShareError {
				t.Errorf("mapping %s, want error", m.Status)
			}

			_, err = e.ctl.Start(ctx, name)
			if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), "hard reboot") {
				t.Errorf("plain start in ERROR: %v; want ErrState asking for a hard reboot", err)
			}
			if _, err := ops.New(e.ctl).Reboot(ctx, name, false); !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), "hard reboot") {
				t.Errorf("soft reboot in ERROR: %v", err)
			}
			if _, err := ops.New(e.ctl).Reboot(ctx, name, true); !errors.Is(err, part.ErrMountFailed) {
				t.Errorf("hard reboot with the mount still failing: %v", err)
			}
			wantError("after a hard reboot that failed")

			// A restart of the daemon (a fresh controller over the same
			// store, the faults part registered as the daemon does) still
			// sees ERROR.
			records, _ := e.st.(store.Records)
			fresh := controller.New(e.st, controller.Options{DataDir: t.TempDir(), Host: "host-a", Parts: []part.Part{faults.New(records, nil)}})
			inst, err := fresh.Get(ctx, name)
			if err != nil || !strings.Contains(inst.Fault, id) {
				t.Errorf("fresh controller: %+v, %v; want the fault kept", inst, err)
			}

			// Detach is allowed in ERROR.
			if _, err := e.svc.DetachShare(ctx, admin, name, id, false); err != nil {
				t.Fatalf("detach in ERROR: %v", err)
			}
			inst, err = ops.New(e.ctl).Reboot(ctx, name, true)
			if err != nil {
				t.Fatalf("hard reboot without the share: %v", err)
			}
			if inst.State != "running" || inst.Fault != "" {
				t.Errorf("after the hard reboot: state %q fault %q", inst.State, inst.Fault)
			}
			// A hard reboot of a running domain powers it off and starts it.
			if inst, err = ops.New(e.ctl).Reboot(ctx, name, true); err != nil || inst.State != "running" {
				t.Fatalf("hard reboot of a running instance: %+v, %v", inst, err)
			}
			if _, err := e.ctl.Stop(ctx, name, time.Second); err != nil {
				t.Fatal(err)
			}
			if inst, err := e.ctl.Start(ctx, name); err != nil || inst.State != "running" {
				t.Fatalf("plain start out of ERROR: %+v, %v", inst, err)
			}
			// A soft reboot of the running instance (libvirt's reboot).
			if inst, err := ops.New(e.ctl).Reboot(ctx, name, false); err != nil || inst.State != "running" {
				t.Fatalf("soft reboot of a running instance: %+v, %v", inst, err)
			}
			if _, err := e.ctl.Stop(ctx, name, time.Second); err != nil {
				t.Fatal(err)
			}
			if _, err := ops.New(e.ctl).Reboot(ctx, name, false); !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), "needs a running instance") {
				t.Errorf("soft reboot of a shut-off instance: %v", err)
			}
			if err := e.ctl.Delete(ctx, name); err != nil {
				t.Fatal(err)
			}
			if rs, _ := e.st.Records(ctx, "instance-fault/"); len(rs) != 0 {
				t.Errorf("fault records left: %v", rs)
			}
		})
	}
}

// flakyHV is the real libvirt connection with Start failing on demand.
type flakyHV struct {
	*virt.Conn
	failStart atomic.Bool
}

func (h *flakyHV) Start(ctx context.Context, name string) error {
	if h.failStart.Load() {
		return errors.New("injected: libvirt start failed")
	}
	return h.Conn.Start(ctx, name)
}

// flakyRecords is the store's records with the writes of the instance
// fault records failing on demand.
type flakyRecords struct {
	st                  store.Records
	failPut, failDelete atomic.Bool
}

func (r *flakyRecords) PutRecord(ctx context.Context, key string, v []byte, version int64) (store.Record, error) {
	if strings.HasPrefix(key, "instance-fault/") && r.failPut.Load() {
		return store.Record{}, errors.New("injected: store write failed")
	}
	return r.st.PutRecord(ctx, key, v, version)
}

func (r *flakyRecords) Record(ctx context.Context, key string) (store.Record, error) {
	return r.st.Record(ctx, key)
}

func (r *flakyRecords) Records(ctx context.Context, prefix string) ([]store.Record, error) {
	return r.st.Records(ctx, prefix)
}

func (r *flakyRecords) DeleteRecord(ctx context.Context, key string, version int64) error {
	if strings.HasPrefix(key, "instance-fault/") && r.failDelete.Load() {
		return errors.New("injected: store delete failed")
	}
	return r.st.DeleteRecord(ctx, key, version)
}

// TestMountFailureErrorFaults injects a failure at each step of a start
// that puts an instance in ERROR and of the hard reboot that takes it
// out, on bolt and Redis, with a real domain in libvirtd (the mount is
// the test runner's, failing like mount.nfs): the fault record not
// written (the start fails with both errors, the instance is not in
// ERROR and a plain start retries); libvirt's start failing in the hard
// reboot (still ERROR, the mapping not active, nothing left mounted);
// the fault record not removed after the domain started (the reboot
// says so; the instance runs and still shows the fault; the next hard
// reboot clears it).
func TestMountFailureErrorFaults(t *testing.T) {
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var hv *flakyHV
			var recs *flakyRecords
			e, uri := libvirtEnvOn(t, backend, func(st store.Store, o *controller.Options) {
				hv = &flakyHV{Conn: o.Hypervisor.(*virt.Conn)}
				recs = &flakyRecords{st: st}
				o.Hypervisor, o.Records = hv, recs
			})
			ctx := context.Background()
			name := domainName(t, uri)
			u := e.instance(name, "demo")
			id := e.nfsShare("demo", "filer:/x")
			e.attach(name, id)
			e.run.fail = map[string]string{"mount ": "mount.nfs: access denied by server while mounting filer:/x"}
			fault := func() string {
				t.Helper()
				inst, err := e.ctl.Get(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				return inst.Fault
			}

			recs.failPut.Store(true)
			_, err := e.ctl.Start(ctx, name)
			if !errors.Is(err, part.ErrMountFailed) || !strings.Contains(err.Error(), "could not be marked ERROR") {
				t.Errorf("start, fault record not written: %v", err)
			}
			if f := fault(); f != "" {
				t.Errorf("fault %q without its record", f)
			}
			recs.failPut.Store(false)
			if _, err := e.ctl.Start(ctx, name); !errors.Is(err, part.ErrMountFailed) {
				t.Fatalf("plain start retried: %v", err)
			}
			if fault() == "" {
				t.Fatal("not in ERROR after the failed start")
			}

			e.run.fail = nil
			hv.failStart.Store(true)
			if _, err := ops.New(e.ctl).Reboot(ctx, name, true); err == nil || !strings.Contains(err.Error(), "injected") {
				t.Errorf("hard reboot, libvirt start failing: %v", err)
			}
			hv.failStart.Store(false)
			if fault() == "" {
				t.Error("ERROR cleared by a hard reboot that did not start the domain")
			}
			if m, _ := e.mapping(u, id); m.Status == types.ShareActive {
				t.Errorf("mapping active after a failed start")
			}
			if ids, _ := e.svc.mounts.mountedShares(); len(ids) != 0 {
				t.Errorf("left mounted after a failed start: %v", ids)
			}

			recs.failDelete.Store(true)
			if _, err := ops.New(e.ctl).Reboot(ctx, name, true); err == nil || !strings.Contains(err.Error(), "clear the ERROR") {
				t.Errorf("hard reboot, fault record not removed: %v", err)
			}
			recs.failDelete.Store(false)
			if inst, err := e.ctl.Get(ctx, name); err != nil || inst.State != "running" || inst.Fault == "" {
				t.Errorf("after the reboot that could not clear ERROR: %+v, %v; want running with the fault shown", inst, err)
			}
			inst, err := ops.New(e.ctl).Reboot(ctx, name, true)
			if err != nil || inst.State != "running" || inst.Fault != "" {
				t.Fatalf("hard reboot: %+v, %v", inst, err)
			}
			if m, _ := e.mapping(u, id); m.Status != types.ShareActive {
				t.Errorf("mapping %s after the hard reboot, want active", m.Status)
			}
			if err := e.ctl.Delete(ctx, name); err != nil {
				t.Fatal(err)
			}
		})
	}
}
