package shares

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
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
			if err := e.ctl.CheckShareSupport(ctx); err != nil {
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
			if !errors.Is(err, controller.ErrMountFailed) || strings.Contains(err.Error(), export) {
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
			if _, err := e.ctl.Reboot(ctx, name, false); !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), "hard reboot") {
				t.Errorf("soft reboot in ERROR: %v", err)
			}
			if _, err := e.ctl.Reboot(ctx, name, true); !errors.Is(err, controller.ErrMountFailed) {
				t.Errorf("hard reboot with the mount still failing: %v", err)
			}
			wantError("after a hard reboot that failed")

			// A restart of the daemon (a fresh controller over the same
			// store) still sees ERROR.
			fresh := controller.New(e.st, controller.Options{DataDir: t.TempDir(), Host: "host-a"})
			inst, err := fresh.Get(ctx, name)
			fresh.Close()
			if err != nil || !strings.Contains(inst.Fault, id) {
				t.Errorf("fresh controller: %+v, %v; want the fault kept", inst, err)
			}

			// Detach is allowed in ERROR.
			if _, err := e.svc.DetachShare(ctx, admin, name, id, false); err != nil {
				t.Fatalf("detach in ERROR: %v", err)
			}
			inst, err = e.ctl.Reboot(ctx, name, true)
			if err != nil {
				t.Fatalf("hard reboot without the share: %v", err)
			}
			if inst.State != "running" || inst.Fault != "" {
				t.Errorf("after the hard reboot: state %q fault %q", inst.State, inst.Fault)
			}
			// A hard reboot of a running domain powers it off and starts it.
			if inst, err = e.ctl.Reboot(ctx, name, true); err != nil || inst.State != "running" {
				t.Fatalf("hard reboot of a running instance: %+v, %v", inst, err)
			}
			if _, err := e.ctl.Stop(ctx, name, time.Second); err != nil {
				t.Fatal(err)
			}
			if inst, err := e.ctl.Start(ctx, name); err != nil || inst.State != "running" {
				t.Fatalf("plain start out of ERROR: %+v, %v", inst, err)
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
