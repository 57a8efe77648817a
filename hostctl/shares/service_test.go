package shares

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/metadata"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/store"
)

// TestMappingLifecycle walks every transition of a mapping on both
// stores, with a real controller (no hypervisor): attach (attaching ->
// inactive, share locked, share in the instance's spec and in the guest's
// metadata at 2025-04-04 and latest), delete of the locked share refused
// naming the instance, start (inactive -> active, NFS mounted once),
// stop (active -> inactive, unmounted), detach (detaching -> gone, share
// unlocked, gone from the metadata), events without export_location.
func TestMappingLifecycle(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, open(t))
			ctx := context.Background()
			uuid := e.instance("web-1", "demo")
			local := e.localShare("demo")
			nfs := e.nfsShare("demo", "nfs.example.com:/exports/data")

			m, err := e.svc.AttachShare(ctx, admin, "web-1", types.ServerShareAttach{ShareID: local})
			if err != nil {
				t.Fatal(err)
			}
			if m.Status != types.ShareInactive || m.Tag != local || m.ExportLocation == "" {
				t.Errorf("attach answered %+v, want inactive, tag = share id, export for admin", m)
			}
			if _, err := e.svc.AttachShare(ctx, admin, uuid, types.ServerShareAttach{ShareID: nfs, Tag: "nfs-data"}); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{local, nfs} {
				if sh := e.share(id); len(sh.Holders) != 1 || sh.Holders[0].Instance != uuid || sh.Holders[0].Host != "host-a" {
					t.Errorf("share %s holders %+v, want web-1's lock", id, sh.Holders)
				}
			}
			for _, v := range []string{"2025-04-04", "latest"} {
				devs := e.devices(uuid, v)
				byTag := map[string]metadata.Device{}
				for _, d := range devs {
					byTag[d.Tag] = d
				}
				if d := byTag[local]; len(devs) != 2 || d.Type != "share" || d.Bus != "none" || d.Address != "none" || d.ShareID != local || byTag["nfs-data"].ShareID != nfs {
					t.Errorf("%s devices %+v, want both shares (type share, bus none, address none)", v, devs)
				}
			}
			if devs := e.devices(uuid, "2020-10-14"); len(devs) != 0 {
				t.Errorf("2020-10-14 lists shares %+v", devs)
			}
			// The config drive hostctl keeps for the instance says the same.
			inst0, err := e.ctl.Get(ctx, "web-1")
			if err != nil {
				t.Fatal(err)
			}
			tree, _, err := configdrive.Read(inst0.ConfigDrive)
			if err != nil {
				t.Fatal(err)
			}
			md, _ := tree.Get("openstack/latest/meta_data.json")
			for _, want := range []string{`"type":"share","bus":"none","address":"none","share_id":"` + nfs + `","tag":"nfs-data"`, `"share_id":"` + local + `","tag":"` + local + `"`} {
				if !strings.Contains(string(md), want) {
					t.Errorf("config drive meta_data.json lacks %s:\n%s", want, md)
				}
			}
			inst, err := e.ctl.Get(ctx, "web-1")
			if err != nil {
				t.Fatal(err)
			}
			srcs := map[string]string{}
			for _, x := range inst.Spec.Shares {
				srcs[x.ShareID] = x.Source
			}
			if len(srcs) != 2 || srcs[nfs] != e.svc.mounts.Dir(nfs) || srcs[local] != e.share(local).Export {
				t.Errorf("spec shares %+v, want the local directory and the NFS mount point", inst.Spec.Shares)
			}

			// Locked: delete refused, naming the instance.
			err = e.svc.DeleteShare(ctx, admin, local)
			if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "web-1") || !strings.Contains(err.Error(), uuid) {
				t.Errorf("delete of a locked share: %v", err)
			}

			// Start: NFS mounted, both active.
			if err := e.svc.PrepareStart(ctx, uuid); err != nil {
				t.Fatal(err)
			}
			e.svc.StartDone(ctx, uuid, nil)
			for _, id := range []string{local, nfs} {
				if m, _ := e.mapping(uuid, id); m.Status != types.ShareActive {
					t.Errorf("after start %s is %s, want active", id, m.Status)
				}
			}
			want := "mount -t nfs -o " + NFSMountOptions + " nfs.example.com:/exports/data " + e.svc.mounts.Dir(nfs)
			if calls := e.run.Calls(); len(calls) != 1 || calls[0] != want {
				t.Errorf("mount calls %q, want %q", calls, want)
			}
			// Stop: inactive, unmounted.
			e.svc.Stopped(ctx, uuid)
			for _, id := range []string{local, nfs} {
				if m, _ := e.mapping(uuid, id); m.Status != types.ShareInactive {
					t.Errorf("after stop %s is %s, want inactive", id, m.Status)
				}
			}
			if calls := e.run.Calls(); len(calls) != 2 || calls[1] != "umount "+e.svc.mounts.Dir(nfs) {
				t.Errorf("calls after stop %q", calls)
			}

			// Detach both: gone, unlocked, gone from the metadata.
			for _, id := range []string{local, nfs} {
				m, err := e.svc.DetachShare(ctx, admin, "web-1", id, false)
				if err != nil {
					t.Fatal(err)
				}
				if m.Status != types.ShareDetaching {
					t.Errorf("detach answered %+v, want detaching", m)
				}
				if _, ok := e.mapping(uuid, id); ok {
					t.Errorf("mapping of %s still there", id)
				}
				if sh := e.share(id); len(sh.Holders) != 0 {
					t.Errorf("share %s still locked by %+v", id, sh.Holders)
				}
			}
			if devs := e.devices(uuid, "latest"); len(devs) != 0 {
				t.Errorf("latest still lists %+v", devs)
			}
			if err := e.svc.DeleteShare(ctx, admin, local); err != nil {
				t.Errorf("delete of an unlocked share: %v", err)
			}

			// Events: attached twice, detached twice, no export.
			evs := e.shareEvents()
			var typs []string
			for _, ev := range evs {
				typs = append(typs, ev.Type)
				if strings.Contains(string(ev.Payload), "exports") || strings.Contains(string(ev.Payload), e.root) {
					t.Errorf("event %s carries the export: %s", ev.Type, ev.Payload)
				}
				var p EventPayload
				if err := json.Unmarshal(ev.Payload, &p); err != nil || p.Instance != uuid || p.ShareID == "" || p.Tag == "" || p.Status == "" {
					t.Errorf("event payload %s (%v)", ev.Payload, err)
				}
			}
			if strings.Join(typs, ",") != "share.attached,share.attached,share.detached,share.detached" {
				t.Errorf("events %v", typs)
			}
			if strings.Contains(e.logs.String(), "nfs.example.com") {
				t.Errorf("the log carries an export location:\n%s", e.logs.String())
			}
		})
	}
}

// TestSharedMountRefcount: one NFS share used by two instances on the
// host is mounted once (the second start reuses it, with a log line) and
// unmounted only when the last instance stops.
func TestSharedMountRefcount(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	a, b := e.instance("a", "demo"), e.instance("b", "demo")
	id := e.nfsShare("demo", "[fd00::5]:/exports/x")
	for _, n := range []string{"a", "b"} {
		if _, err := e.svc.AttachShare(ctx, admin, n, types.ServerShareAttach{ShareID: id}); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{a, b} {
		if err := e.svc.PrepareStart(ctx, u); err != nil {
			t.Fatal(err)
		}
		e.svc.StartDone(ctx, u, nil)
	}
	if calls := e.run.Calls(); len(calls) != 1 || !strings.HasSuffix(calls[0], "[fd00::5]:/exports/x "+e.svc.mounts.Dir(id)) {
		t.Errorf("mounts %q, want one", calls)
	}
	if !strings.Contains(e.logs.String(), "already mounted on this host for another instance") {
		t.Error("no log line for the reused mount")
	}
	e.svc.Stopped(ctx, a)
	if calls := e.run.Calls(); len(calls) != 1 {
		t.Errorf("unmounted while b still runs: %q", calls)
	}
	e.svc.Stopped(ctx, b)
	if calls := e.run.Calls(); len(calls) != 2 || calls[1] != "umount "+e.svc.mounts.Dir(id) {
		t.Errorf("calls %q, want the unmount after the last stop", calls)
	}
}

// TestMountFailureErrors (bolt and Redis): a mount that fails moves the
// mapping to error and refuses the start with part.ErrMountFailed
// (the controller then marks the instance ERROR: TestLibvirtMountFailureError),
// and a later start (the hard reboot) retries the mount and makes it active. A failed unmount on
// stop moves it to error too, and the reconciler retries the unmount.
func TestMountFailureErrors(t *testing.T) {
	for backend, open := range stores(t) {
		t.Run(backend, func(t *testing.T) { mountFailureErrors(t, newEnv(t, open(t))) })
	}
}

func mountFailureErrors(t *testing.T, e *env) {
	ctx := context.Background()
	u := e.instance("a", "demo")
	id := e.nfsShare("demo", "filer:/x")
	if _, err := e.svc.AttachShare(ctx, admin, "a", types.ServerShareAttach{ShareID: id}); err != nil {
		t.Fatal(err)
	}
	e.run.fail = map[string]string{"mount ": "mount.nfs: access denied by server while mounting filer:/x"}
	err := e.svc.PrepareStart(ctx, u)
	if !errors.Is(err, part.ErrMountFailed) || !strings.Contains(err.Error(), "ERROR") || strings.Contains(err.Error(), "filer:/x") {
		t.Fatalf("start with a failing mount: %v (want ERROR, without the export)", err)
	}
	m, _ := e.mapping(u, id)
	if m.Status != types.ShareError || !strings.Contains(m.Error, "access denied") || strings.Contains(m.Error, "filer") {
		t.Errorf("mapping %+v, want error with a redacted reason", m)
	}
	// The hard reboot: the mount works now.
	e.run.fail = nil
	if err := e.svc.PrepareStart(ctx, u); err != nil {
		t.Fatal(err)
	}
	e.svc.StartDone(ctx, u, nil)
	if m, _ := e.mapping(u, id); m.Status != types.ShareActive {
		t.Errorf("after the hard reboot: %s", m.Status)
	}
	e.run.fail = map[string]string{"umount ": "umount: target is busy"}
	e.svc.Stopped(ctx, u)
	if m, _ := e.mapping(u, id); m.Status != types.ShareError {
		t.Errorf("after a failed unmount: %s, want error", m.Status)
	}
	e.run.fail = nil
	if err := e.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if calls := e.run.Calls(); calls[len(calls)-1] != "umount "+e.svc.mounts.Dir(id) {
		t.Errorf("the reconciler did not retry the unmount: %q", calls)
	}
	if ids, _ := e.svc.mounts.mountedShares(); len(ids) != 0 {
		t.Errorf("still mounted: %v", ids)
	}
}

// TestDeleteInstanceDetaches: deleting an instance detaches its shares
// (mapping gone, share unlocked, mount released); when that fails the
// instance is still deleted and the reconciler finishes the job.
func TestDeleteInstanceDetaches(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	u := e.instance("a", "demo")
	id := e.nfsShare("demo", "filer:/x")
	if _, err := e.svc.AttachShare(ctx, admin, "a", types.ServerShareAttach{ShareID: id}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.PrepareStart(ctx, u); err != nil {
		t.Fatal(err)
	}
	e.svc.StartDone(ctx, u, nil)
	e.run.fail = map[string]string{"umount ": "umount: target is busy"}
	if err := e.ctl.Delete(ctx, "a"); err != nil {
		t.Fatalf("delete with a failing unmount: %v (the instance must still go)", err)
	}
	if _, err := e.st.Instance(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("instance still there: %v", err)
	}
	if m, ok := e.mapping(u, id); !ok || m.Status != types.ShareDetaching {
		t.Errorf("mapping %+v %v, want it left detaching for the reconciler", m, ok)
	}
	e.run.fail = nil
	if err := e.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.mapping(u, id); ok {
		t.Error("mapping still there after the reconciler")
	}
	if sh := e.share(id); len(sh.Holders) != 0 {
		t.Errorf("share still locked: %+v", sh.Holders)
	}
	if ids, _ := e.svc.mounts.mountedShares(); len(ids) != 0 {
		t.Errorf("host mount kept for a deleted instance: %v", ids)
	}
}

// TestCreateRefused: bad share definitions are refused with a field
// error and change nothing.
func TestCreateRefused(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	outside := t.TempDir()
	file := filepath.Join(e.root, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.root, NFSMountDir, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	good := types.ShareCreateRequest{ProjectID: "demo", Proto: types.ShareProtoNFS, ExportLocation: "filer:/x"}
	with := func(f func(*types.ShareCreateRequest)) types.ShareCreateRequest { r := good; f(&r); return r }
	for _, tc := range []struct {
		name, field, says string
		req               types.ShareCreateRequest
	}{
		{"malformed uuid", "id", "must be a UUID", with(func(r *types.ShareCreateRequest) { r.ID = "1234" })},
		{"no project", "project_id", "is required", with(func(r *types.ShareCreateRequest) { r.ProjectID = "" })},
		{"bad proto", "share_proto", "must be local, nfs or cephfs", with(func(r *types.ShareCreateRequest) { r.Proto = "smb" })},
		{"nfs without colon", "export_location", "no ':'", with(func(r *types.ShareCreateRequest) { r.ExportLocation = "filer/x" })},
		{"nfs relative path", "export_location", "absolute", with(func(r *types.ShareCreateRequest) { r.ExportLocation = "filer:x" })},
		{"nfs bad v6", "export_location", "not an IPv6 address", with(func(r *types.ShareCreateRequest) { r.ExportLocation = "[fd00::zz]:/x" })},
		{"nfs bare v6", "export_location", "must be in brackets", with(func(r *types.ShareCreateRequest) { r.ExportLocation = "::1:/x" })},
		{"nfs comma", "export_location", "','", with(func(r *types.ShareCreateRequest) { r.ExportLocation = "filer:/x,ro" })},
		{"nfs bad host", "export_location", "not a host name", with(func(r *types.ShareCreateRequest) { r.ExportLocation = "-o:/x" })},
		{"local missing", "export_location", "does not exist", types.ShareCreateRequest{ProjectID: "demo", Proto: "local", ExportLocation: filepath.Join(e.root, "nope")}},
		{"local file", "export_location", "is not a directory", types.ShareCreateRequest{ProjectID: "demo", Proto: "local", ExportLocation: file}},
		{"local symlink escape", "export_location", "resolves to " + outside, types.ShareCreateRequest{ProjectID: "demo", Proto: "local", ExportLocation: filepath.Join(e.root, "escape")}},
		{"local outside", "export_location", "outside the share root", types.ShareCreateRequest{ProjectID: "demo", Proto: "local", ExportLocation: outside}},
		{"local in the nfs mounts", "export_location", "where hostctl mounts NFS shares", types.ShareCreateRequest{ProjectID: "demo", Proto: "local", ExportLocation: filepath.Join(e.root, NFSMountDir, "x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot()
			_, err := e.svc.CreateShare(ctx, admin, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v; want %s: %s", err, tc.field, tc.says)
			}
			if after := e.snapshot(); after != before {
				t.Errorf("refused create changed something:\n%s\n%s", before, after)
			}
		})
	}
	// A member may not create shares; a duplicate id conflicts.
	if _, err := e.svc.CreateShare(ctx, types.Principal{Role: types.RoleMember, Project: "demo"}, good); !errors.Is(err, ErrForbidden) {
		t.Errorf("member create: %v", err)
	}
	id := e.nfsShare("demo", "filer:/x")
	if _, err := e.svc.CreateShare(ctx, admin, with(func(r *types.ShareCreateRequest) { r.ID = strings.ToUpper(id) })); !errors.Is(err, store.ErrConflict) {
		t.Errorf("duplicate id: %v", err)
	}
}

// TestInstanceUpdateEvents: with the option on, every mapping change
// emits an instance.update event carrying all the instance's mappings
// (no export location); off (the default) emits none.
func TestInstanceUpdateEvents(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint("on=", on), func(t *testing.T) {
			e := newEnv(t, stores(t)["redis"](t))
			e.svc.instEvts = on
			ctx := context.Background()
			u := e.instance("a", "demo")
			id, nfs := e.localShare("demo"), e.nfsShare("demo", "filer:/x")
			e.attach("a", id)
			e.attach("a", nfs)
			if err := e.svc.PrepareStart(ctx, u); err != nil {
				t.Fatal(err)
			}
			e.svc.StartDone(ctx, u, nil)
			e.svc.Stopped(ctx, u)
			evs, err := events.Read(ctx, e.events, InstanceStream, "", 100, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !on {
				if len(evs) != 0 {
					t.Errorf("option off, %d instance.update events", len(evs))
				}
				return
			}
			var got []string
			for _, ev := range evs {
				var p InstanceUpdatePayload
				if err := json.Unmarshal(ev.Payload, &p); err != nil || ev.Type != EventInstanceUpdate || p.Instance != u || p.Name != "a" {
					t.Fatalf("event %+v: %v", ev, err)
				}
				if strings.Contains(string(ev.Payload), "filer") || strings.Contains(string(ev.Payload), e.root) {
					t.Errorf("export location in %s", ev.Payload)
				}
				var sts []string
				for _, m := range p.Shares {
					sts = append(sts, m.Status)
				}
				got = append(got, strings.Join(sts, "+"))
			}
			want := "inactive|inactive+inactive|active+active|inactive+inactive"
			if strings.Join(got, "|") != want {
				t.Errorf("instance.update statuses %q, want %q", strings.Join(got, "|"), want)
			}
		})
	}
}

// TestSpecLineTagClash: a share a spec names may not take the tag of a
// share already attached; the apply is refused naming the tag and the
// share that has it, and nothing changes.
func TestSpecLineTagClash(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	e.instance("a", "demo")
	id := e.localShare("demo")
	other := e.localShare("demo")
	if _, err := e.svc.AttachShare(ctx, admin, "a", types.ServerShareAttach{ShareID: id, Tag: "data"}); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	_, err := e.ctl.Apply(ctx, []byte("name: a\nproject_id: demo\nshares: [{share_id: "+other+", tag: data}]\n"))
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `share.tag "data"`) || !strings.Contains(err.Error(), id) {
		t.Errorf("apply with a clashing tag: %v", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("the refused apply changed something")
	}
	// Re-applying the operator's own spec keeps the registry's share.
	if _, err := e.ctl.Apply(ctx, []byte("name: a\nproject_id: demo\n")); err != nil {
		t.Fatal(err)
	}
	if devs := e.devices(e.share(id).Holders[0].Instance, "latest"); len(devs) != 1 || devs[0].Tag != "data" {
		t.Errorf("after re-applying the spec: %+v", devs)
	}
}

// TestMovesRefused: resize and rebuild are refused (409) while a share is
// attached, as the specification says, and work again once it is
// detached (here they fail later, for want of a flavor or an image).
func TestMovesRefused(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	e.instance("a", "demo")
	id := e.localShare("demo")
	e.attach("a", id)
	before := e.snapshot()
	_, err := ops.New(e.ctl).Resize(ctx, "a", "m1.large")
	if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), "resize is refused while a share is attached") || !strings.Contains(err.Error(), id) {
		t.Errorf("resize: %v", err)
	}
	_, err = ops.New(e.ctl).Rebuild(ctx, "a", "debian-12")
	if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), "rebuild is refused while a share is attached") {
		t.Errorf("rebuild: %v", err)
	}
	if after := e.snapshot(); after != before {
		t.Error("a refused move changed something")
	}
	if _, err := e.svc.DetachShare(ctx, admin, "a", id, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.New(e.ctl).Resize(ctx, "a", "m1.large"); err == nil || strings.Contains(err.Error(), "share") {
		t.Errorf("resize after the detach: %v (want a refusal that is not about shares)", err)
	}
}
