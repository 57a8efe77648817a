package controller

// The config drive follows on running domains (the config-drive media
// part, hostctl/parts/configdrive, as the harness registers it), against
// the fake hypervisor.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/virt"
)

// driveTags returns the tags the config drive at path carries.
func driveTags(t *testing.T, path string) []string {
	t.Helper()
	tree, _, err := configdrive.Read(path)
	if err != nil {
		t.Fatalf("config drive %s: %v", path, err)
	}
	md, ok := tree.Get("openstack/latest/meta_data.json")
	if !ok {
		t.Fatalf("config drive %s lacks meta_data.json", path)
	}
	var tags []string
	for _, m := range regexp.MustCompile(`"tags":\["([^"]*)"`).FindAllStringSubmatch(string(md), -1) {
		tags = append(tags, m[1])
	}
	slices.Sort(tags)
	return tags
}

// mediaFiles lists the instance's disk.config.<N> files.
func mediaFiles(t *testing.T, e *env, name string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(e.dir, "instances", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range ents {
		if mediumFileRE.MatchString(x.Name()) {
			out = append(out, x.Name())
		}
	}
	return out
}

// cdromSource is the config drive's medium in the domain's live or
// persistent XML.
func cdromSource(t *testing.T, hv Hypervisor, name string, live bool) string {
	t.Helper()
	doc, err := hv.XML(context.Background(), name, live)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := virt.ParseDevices(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs.Disks {
		if d.Alias == virt.ConfigDriveAlias {
			return d.Source
		}
	}
	t.Fatal("no config drive")
	return ""
}

// TestMediumFollowsRunningDomain: every publish of a running domain —
// re-apply, attach, detach — puts the rebuilt drive into its cdrom as a
// new file (live, forced), deletes the medium it replaces and keeps
// disk.config, which the persistent definition names, the same drive; a
// shut-off domain's publishes change no medium, and stopping or starting
// the domain leaves no medium file behind.
func TestMediumFollowsRunningDomain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	dir := filepath.Join(e.dir, "instances", "app-1")
	drive := filepath.Join(dir, "disk.config")
	e.mustApply(hvSpec)
	if _, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "cold", Bus: "scsi", Size: "8M"}); err != nil {
		t.Fatal(err)
	}
	if len(e.hv.updates) != 0 || len(mediaFiles(t, e, "app-1")) != 0 {
		t.Fatalf("publishes of a shut-off domain changed media: %+v, files %v", e.hv.updates, mediaFiles(t, e, "app-1"))
	}
	if _, err := e.c.DetachDisk(ctx, "app-1", types.DetachRequest{Tag: "cold"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if got := cdromSource(t, e.hv, "app-1", true); got != drive {
		t.Fatalf("booted with medium %s, want %s", got, drive)
	}

	// step checks the state after a publish that created revision rev.
	step := func(what string, rev int, wantTags []string) {
		t.Helper()
		medium := filepath.Join(dir, "disk.config."+strconv.Itoa(rev))
		if n := len(e.hv.updates); n == 0 || e.hv.updates[n-1].source != medium {
			t.Fatalf("%s: last medium change %+v, want %s", what, e.hv.updates, medium)
		}
		u := e.hv.updates[len(e.hv.updates)-1]
		if u.affect != virt.AffectLive|virt.AffectForce || u.target != configDriveTarget(t, e) {
			t.Errorf("%s: medium change %+v, want live+force on the config drive %s", what, u, configDriveTarget(t, e))
		}
		if got := cdromSource(t, e.hv, "app-1", true); got != medium {
			t.Errorf("%s: live medium %s, want %s", what, got, medium)
		}
		if got := cdromSource(t, e.hv, "app-1", false); got != drive {
			t.Errorf("%s: the persistent definition's medium is %s, want %s", what, got, drive)
		}
		if got := mediaFiles(t, e, "app-1"); !slices.Equal(got, []string{filepath.Base(medium)}) {
			t.Errorf("%s: medium files %v, want only %s", what, got, filepath.Base(medium))
		}
		if got := driveTags(t, medium); !slices.Equal(got, wantTags) {
			t.Errorf("%s: the guest's medium has tags %v, want %v", what, got, wantTags)
		}
		if got := driveTags(t, drive); !slices.Equal(got, wantTags) {
			t.Errorf("%s: disk.config has tags %v, want %v", what, got, wantTags)
		}
		a, _ := os.Stat(medium)
		b, _ := os.Stat(drive)
		if !os.SameFile(a, b) {
			t.Errorf("%s: disk.config is not the medium's file", what)
		}
	}
	inst, err := e.apply(strings.Replace(hvSpec, "tag: data", "tag: data2", 1))
	if err != nil {
		t.Fatal(err)
	}
	step("re-apply with a new tag", int(inst.Revision), []string{"back", "data2", "db", "front", "root"})
	if inst, err = e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "hot", Bus: "scsi", Size: "8M", Serial: "hot-1"}); err != nil {
		t.Fatal(err)
	}
	step("attach-disk", int(inst.Revision), []string{"back", "data2", "db", "front", "hot", "root"})
	if inst, err = e.c.AttachNIC(ctx, "app-1", types.NICRequest{Tag: "hotnic"}); err != nil {
		t.Fatal(err)
	}
	step("attach-nic", int(inst.Revision), []string{"back", "data2", "db", "front", "hot", "hotnic", "root"})
	if inst, err = e.c.DetachDisk(ctx, "app-1", types.DetachRequest{Tag: "hot"}); err != nil {
		t.Fatal(err)
	}
	step("detach-disk", int(inst.Revision), []string{"back", "data2", "db", "front", "hotnic", "root"})
	if inst, err = e.c.DetachNIC(ctx, "app-1", types.DetachRequest{Tag: "hotnic"}); err != nil {
		t.Fatal(err)
	}
	step("detach-nic", int(inst.Revision), []string{"back", "data2", "db", "front", "root"})
	if len(inst.Warnings) != 0 {
		t.Errorf("warnings %v", inst.Warnings)
	}

	// A device removed behind hostctl's back: the reconciler's publish
	// changes the medium too.
	e.hv.removeDeviceBehindBack("app-1", "sda")
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := e.c.Get(ctx, "app-1")
	step("reconcile", int(got.Revision), []string{"back", "data2", "front", "root"})

	// Stopped: no medium file is left; the next boot reads disk.config.
	if _, err := e.c.Stop(ctx, "app-1", 1); err != nil {
		t.Fatal(err)
	}
	if got := mediaFiles(t, e, "app-1"); len(got) != 0 {
		t.Errorf("medium files after stop: %v", got)
	}
	n := len(e.hv.updates)
	if _, err := e.apply(strings.Replace(strings.Replace(hvSpec, "tag: data", "tag: data3", 1), "  - {name: sda, bus: scsi, size: 8M, tag: db, serial: db-1}\n", "", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if len(e.hv.updates) != n || cdromSource(t, e.hv, "app-1", true) != drive {
		t.Errorf("after a restart: medium %s, changes %+v", cdromSource(t, e.hv, "app-1", true), e.hv.updates[n:])
	}
	if got := driveTags(t, drive); !slices.Equal(got, []string{"back", "data3", "front", "root"}) {
		t.Errorf("disk.config after the shut-off re-apply: %v", got)
	}
}

// TestMediumVirtioConfigDrive: a virtio config drive cannot change media;
// the publish goes through, disk.config follows, and the result warns
// that the running guest does not see it.
func TestMediumVirtioConfigDrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.c.dom.ConfigDriveBus = "virtio"
	e.mustApply(hvSpec)
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	inst, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "hot", Bus: "scsi", Size: "8M"})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.hv.updates) != 0 || len(mediaFiles(t, e, "app-1")) != 0 {
		t.Errorf("virtio config drive: medium changes %+v, files %v", e.hv.updates, mediaFiles(t, e, "app-1"))
	}
	if !slices.ContainsFunc(inst.Warnings, func(w string) bool { return strings.Contains(w, "no medium to change") }) {
		t.Errorf("warnings %v lack the virtio config drive's", inst.Warnings)
	}
	if !slices.Contains(driveTags(t, filepath.Join(e.dir, "instances", "app-1", "disk.config")), "hot") {
		t.Error("disk.config lacks the attached disk")
	}

	// The daemon's option changes, the running domain keeps its virtio
	// drive; and the other way round.
	e.c.dom.ConfigDriveBus = "sata"
	if inst, err = e.c.DetachDisk(ctx, "app-1", types.DetachRequest{Tag: "hot"}); err != nil || len(e.hv.updates) != 0 || len(inst.Warnings) != 1 {
		t.Errorf("virtio drive, daemon now sata: %v, changes %+v, warnings %v", err, e.hv.updates, inst.Warnings)
	}
	e2 := newEnv(t)
	e2.mustApply(hvSpec)
	if _, err := e2.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	e2.c.dom.ConfigDriveBus = "virtio"
	if _, err := e2.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "hot", Bus: "scsi", Size: "8M"}); err != nil || len(e2.hv.updates) != 1 {
		t.Errorf("cdrom drive, daemon now virtio: %v, changes %+v", err, e2.hv.updates)
	}
}

// stoppingHV is a fake whose guest powers off while its medium is being
// changed.
type stoppingHV struct{ *fakeHV }

func (s stoppingHV) UpdateDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error {
	s.mu.Lock()
	s.domains[name].running, s.domains[name].media = false, nil
	s.mu.Unlock()
	return errors.New("domain is not running")
}

// TestMediumGuestStopsMeanwhile: a domain that stops during the medium
// change boots from disk.config next time; the publish goes through.
func TestMediumGuestStopsMeanwhile(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.mustApply(hvSpec)
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	withMedia(e, stoppingHV{e.hv}) // the part changes the medium (export_media_test.go)
	if _, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "hot", Bus: "scsi", Size: "8M", Affect: types.Affect{Config: true}}); err == nil {
		t.Fatal("--config alone on a running domain accepted")
	}
	inst, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "hot", Bus: "scsi", Size: "8M"})
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != "shutoff" || len(mediaFiles(t, e, "app-1")) != 0 {
		t.Errorf("state %s, medium files %v", inst.State, mediaFiles(t, e, "app-1"))
	}
	if !slices.Contains(driveTags(t, filepath.Join(e.dir, "instances", "app-1", "disk.config")), "hot") {
		t.Error("disk.config lacks the attached disk")
	}
}

// TestFaultsMedium: every failure of a publish that changes the medium —
// the first one (the domain booted from disk.config) and a later one (a
// medium file in the cdrom) — puts the previous medium back and leaves
// nothing behind.
func TestFaultsMedium(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	running := func(e *env) {
		e.mustApply(hvSpec)
		if _, err := e.c.Start(ctx, "app-1"); err != nil {
			e.t.Fatal(err)
		}
	}
	retag := func(e *env) error {
		_, err := e.apply(strings.Replace(hvSpec, "tag: data", "tag: data2", 1))
		return err
	}
	t.Run("re-apply/first", func(t *testing.T) { faultMatrix(t, running, retag) })
	t.Run("attach-disk/later", func(t *testing.T) {
		faultMatrix(t, func(e *env) {
			running(e)
			if err := retag(e); err != nil {
				e.t.Fatal(err)
			}
		}, func(e *env) error {
			_, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "hot", Bus: "scsi", Size: "8M", Serial: "hot-1"})
			return err
		})
	})
}
