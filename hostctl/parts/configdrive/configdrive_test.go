package configdrive_test

import (
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

	drive "github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/configdrive"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// update is one medium change the fake was asked for.
type update struct {
	xml    string
	affect virt.Affect
}

// hv is one domain, app-1, with a config drive (none when bus is "").
type hv struct {
	mu      sync.Mutex
	missing bool
	state   virt.State
	bus     string // sata (a cdrom) or virtio (a disk); "": no drive
	// live is the drive's medium: the running domain's, or for a domain
	// that is off, the persistent definition's.
	live    string
	updates []update
	// onUpdate, when set, answers UpdateDevice instead.
	onUpdate func(h *hv) error
}

func (h *hv) State(context.Context, string) (virt.State, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.missing {
		return "", fmt.Errorf("domain app-1: %w", virt.ErrNotFound)
	}
	return h.state, nil
}

func (h *hv) XML(context.Context, string, bool) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.missing {
		return nil, fmt.Errorf("domain app-1: %w", virt.ErrNotFound)
	}
	var disk string
	switch h.bus {
	case "sata":
		disk = `<disk type="file" device="cdrom"><source file="` + h.live + `"/><target dev="sda" bus="sata"/><readonly/><alias name="` + virt.ConfigDriveAlias + `"/></disk>`
	case "virtio":
		disk = `<disk type="file" device="disk"><source file="` + h.live + `"/><target dev="vdb" bus="virtio"/><readonly/><alias name="` + virt.ConfigDriveAlias + `"/></disk>`
	}
	return []byte(`<domain type="kvm"><name>app-1</name><devices>` +
		`<disk type="file" device="disk"><source file="/img/root.qcow2"/><target dev="vda" bus="virtio"/></disk>` +
		disk + `</devices></domain>`), nil
}

func (h *hv) UpdateDevice(_ context.Context, _ string, deviceXML []byte, affect virt.Affect) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.updates = append(h.updates, update{xml: string(deviceXML), affect: affect})
	if h.onUpdate != nil {
		return h.onUpdate(h)
	}
	if h.state == virt.StateShutoff {
		return errors.New("domain is not running")
	}
	d, err := virt.ParseDevices([]byte(`<domain><devices>` + string(deviceXML) + `</devices></domain>`))
	if err != nil {
		return err
	}
	if len(d.Disks) != 1 {
		return fmt.Errorf("%d disks, want one", len(d.Disks))
	}
	if _, err := os.Stat(d.Disks[0].Source); err != nil {
		return fmt.Errorf("cannot open the new medium: %w", err)
	}
	h.live = d.Disks[0].Source
	return nil
}

func (h *hv) changes() []update {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.updates)
}

func (h *hv) medium() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live
}

// setup makes the data directory of app-1 with disk.config (revision 1)
// and the staged drive of revision rev; it returns the data directory,
// the instance directory and the staged drive.
func setup(t *testing.T, rev int64) (dataDir, dir, staged string) {
	t.Helper()
	dataDir = t.TempDir()
	dir = filepath.Join(dataDir, "instances", "app-1")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	build(t, filepath.Join(dir, configdrive.DriveFile), 1)
	staged = filepath.Join(dir, configdrive.DriveFile+".staged")
	build(t, staged, rev)
	return dataDir, dir, staged
}

// build writes a config drive of revision rev to path.
func build(t *testing.T, path string, rev int64) {
	t.Helper()
	tree, err := metadata.Render(&model.Instance{Name: "app-1", UUID: "5b1f0b5c-3f1a-4c47-9d64-0e0b4e1f5a11"}, metadata.Options{Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	if err := drive.Build(path, tree.ConfigDriveFiles(), drive.Options{Format: drive.ISO9660}); err != nil {
		t.Fatal(err)
	}
}

// media lists the medium files (disk.config.<N>) of dir.
func media(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if configdrive.MediumFileRE.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("old medium"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newReverter() *revert.Reverter { return revert.New(slog.New(slog.DiscardHandler), "test") }

// TestChangeMediumRunning: the staged drive goes into the running
// domain's cdrom as disk.config.<rev> (the same file, live and forced);
// the commit deletes every other medium file; a failure after the swap
// puts the previous medium back and removes the new file.
func TestChangeMediumRunning(t *testing.T) {
	ctx := context.Background()
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			dataDir, dir, staged := setup(t, 7)
			disk := filepath.Join(dir, configdrive.DriveFile)
			h := &hv{state: virt.StateRunning, bus: "sata", live: disk}
			touch(t, filepath.Join(dir, "disk.config.5")) // leftovers of a crash
			touch(t, filepath.Join(dir, "disk.config.7"))
			p := configdrive.New(h, dataDir, nil)
			r := newReverter()
			commit, warn, err := p.ChangeMedium(ctx, r, "app-1", staged, 7)
			if err != nil || len(warn) != 0 {
				t.Fatalf("ChangeMedium: %v, warnings %v", err, warn)
			}
			medium := filepath.Join(dir, "disk.config.7")
			us := h.changes()
			if len(us) != 1 || us[0].affect != virt.AffectLive|virt.AffectForce || !strings.Contains(us[0].xml, medium) || !strings.Contains(us[0].xml, `dev="sda"`) {
				t.Fatalf("medium changes %+v, want one live+force to %s on sda", us, medium)
			}
			if h.medium() != medium {
				t.Fatalf("cdrom holds %s, want %s", h.medium(), medium)
			}
			a, _ := os.Stat(medium)
			b, _ := os.Stat(staged)
			if !os.SameFile(a, b) {
				t.Error("the medium is not the staged drive's file")
			}
			if fail {
				err := errors.New("store write failed")
				r.Fail(&err)
				if h.medium() != disk {
					t.Errorf("after the failure the cdrom holds %s, want %s back", h.medium(), disk)
				}
				if _, err := os.Stat(medium); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the new medium file is still there: %v", err)
				}
				return
			}
			r.Success()
			commit()
			if got := media(t, dir); !slices.Equal(got, []string{"disk.config.7"}) {
				t.Errorf("medium files after the commit %v, want only disk.config.7", got)
			}
		})
	}
}

// TestChangeMediumNothingToSwap: no hypervisor, no domain, a domain that
// is off, a domain without a config drive: nothing changes until the
// commit, which deletes the medium files (a domain that is off boots
// from disk.config).
func TestChangeMediumNothingToSwap(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		hv   *hv
	}{
		{"no hypervisor", nil},
		{"no domain", &hv{missing: true}},
		{"shut off", &hv{state: virt.StateShutoff, bus: "sata"}},
		{"no config drive", &hv{state: virt.StateRunning}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, dir, staged := setup(t, 2)
			touch(t, filepath.Join(dir, "disk.config.1"))
			var h configdrive.Hypervisor
			if tc.hv != nil {
				h = tc.hv
			}
			p := configdrive.New(h, dataDir, nil)
			commit, warn, err := p.ChangeMedium(ctx, newReverter(), "app-1", staged, 2)
			if err != nil || len(warn) != 0 {
				t.Fatalf("ChangeMedium: %v, warnings %v", err, warn)
			}
			if tc.hv != nil && len(tc.hv.changes()) != 0 {
				t.Errorf("medium changes %+v", tc.hv.changes())
			}
			if got := media(t, dir); !slices.Equal(got, []string{"disk.config.1"}) {
				t.Errorf("medium files before the commit %v", got)
			}
			commit()
			if got := media(t, dir); len(got) != 0 {
				t.Errorf("medium files after the commit %v", got)
			}
		})
	}
}

// TestChangeMediumVirtio: a virtio config drive cannot change media:
// nothing is swapped, and the warning says the running guest does not see
// the new drive.
func TestChangeMediumVirtio(t *testing.T) {
	dataDir, dir, staged := setup(t, 2)
	h := &hv{state: virt.StateRunning, bus: "virtio", live: filepath.Join(dir, configdrive.DriveFile)}
	p := configdrive.New(h, dataDir, nil)
	_, warn, err := p.ChangeMedium(context.Background(), newReverter(), "app-1", staged, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(warn, []string{configdrive.NoMediaChangeWarning}) || !strings.Contains(warn[0], "no medium to change") {
		t.Errorf("warnings %v, want the virtio drive's", warn)
	}
	if len(h.changes()) != 0 || len(media(t, dir)) != 0 {
		t.Errorf("virtio config drive: medium changes %+v, files %v", h.changes(), media(t, dir))
	}
}

// TestChangeMediumGuestStops: a domain that stops during the medium
// change boots from disk.config next time: no error, no medium file; a
// change that fails while the domain runs fails the publish, and its
// revert removes the new file.
func TestChangeMediumGuestStops(t *testing.T) {
	ctx := context.Background()
	dataDir, dir, staged := setup(t, 2)
	h := &hv{state: virt.StateRunning, bus: "sata", live: filepath.Join(dir, configdrive.DriveFile),
		onUpdate: func(h *hv) error { h.state = virt.StateShutoff; return errors.New("domain is not running") }}
	p := configdrive.New(h, dataDir, nil)
	if _, _, err := p.ChangeMedium(ctx, newReverter(), "app-1", staged, 2); err != nil {
		t.Fatalf("the guest stopped meanwhile: %v", err)
	}
	if got := media(t, dir); len(got) != 0 {
		t.Errorf("medium files %v", got)
	}

	h = &hv{state: virt.StateRunning, bus: "sata", live: filepath.Join(dir, configdrive.DriveFile),
		onUpdate: func(*hv) error { return errors.New("tray locked") }}
	p = configdrive.New(h, dataDir, nil)
	r := newReverter()
	_, _, err := p.ChangeMedium(ctx, r, "app-1", staged, 3)
	if err == nil || !strings.Contains(err.Error(), "change the config drive medium") || !strings.Contains(err.Error(), "tray locked") {
		t.Fatalf("a failed medium change: %v", err)
	}
	r.Fail(&err)
	if got := media(t, dir); len(got) != 0 {
		t.Errorf("medium files after the revert %v", got)
	}
}

// TestChangeMediumForeignMedium: a medium hostctl did not put there (not
// in the data directory) is replaced and not put back on failure.
func TestChangeMediumForeignMedium(t *testing.T) {
	dataDir, dir, staged := setup(t, 4)
	foreign := filepath.Join(t.TempDir(), "other.iso")
	touch(t, foreign)
	h := &hv{state: virt.StateRunning, bus: "sata", live: foreign}
	p := configdrive.New(h, dataDir, nil)
	r := newReverter()
	if _, _, err := p.ChangeMedium(context.Background(), r, "app-1", staged, 4); err != nil {
		t.Fatal(err)
	}
	if h.medium() != filepath.Join(dir, "disk.config.4") {
		t.Fatalf("cdrom holds %s", h.medium())
	}
	err := errors.New("store write failed")
	r.Fail(&err)
	if n := len(h.changes()); n != 1 {
		t.Errorf("the foreign medium was put back: changes %+v", h.changes())
	}
}

// TestStopAndStartPrune: a domain that stops, or is about to start, has
// no medium file left; disk.config and the other files stay.
func TestStopAndStartPrune(t *testing.T) {
	for _, phase := range []string{"stop", "start"} {
		t.Run(phase, func(t *testing.T) {
			dataDir, dir, _ := setup(t, 2)
			touch(t, filepath.Join(dir, "disk.config.3"))
			touch(t, filepath.Join(dir, "disk.config.4"))
			touch(t, filepath.Join(dir, "disk.config.x"))
			p := configdrive.New(nil, dataDir, nil)
			in := &part.Instance{Spec: &model.Instance{Name: "app-1"}}
			var err error
			if phase == "stop" {
				err = p.AfterStop(context.Background(), in)
			} else {
				err = p.BeforeStart(context.Background(), in, newReverter())
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := media(t, dir); len(got) != 0 {
				t.Errorf("medium files %v", got)
			}
			for _, f := range []string{configdrive.DriveFile, configdrive.DriveFile + ".staged", "disk.config.x"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("%s: %v", f, err)
				}
			}
			// An instance without a directory: nothing to do.
			if err := p.AfterStop(context.Background(), &part.Instance{Spec: &model.Instance{Name: "gone"}}); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestDriveTransport: the revision the drive carries: the medium in a
// running domain's cdrom, disk.config for a domain that is off, only the
// next boot's for a running virtio drive; none without a drive.
func TestDriveTransport(t *testing.T) {
	dataDir, dir, _ := setup(t, 2)
	app1 := &part.Instance{Spec: &model.Instance{Name: "app-1"}}
	medium := filepath.Join(dir, "disk.config.6")
	build(t, medium, 6)
	disk := filepath.Join(dir, configdrive.DriveFile)
	broken := filepath.Join(dir, "disk.config.9")
	touch(t, broken)
	cases := []struct {
		name    string
		hv      *hv
		running bool
		want    part.Transport
	}{
		{"running cdrom", &hv{bus: "sata", live: medium}, true, part.Transport{Revision: 6, NextBoot: 6, Note: "disk.config.6"}},
		{"off", &hv{bus: "sata", live: disk}, false, part.Transport{Revision: 1, NextBoot: 1, Note: "disk.config"}},
		{"running virtio", &hv{bus: "virtio", live: disk}, true, part.Transport{NextBoot: 1,
			Note: "a virtio disk: the running guest reads the drive it booted with; the next boot reads disk.config"}},
		{"no drive", &hv{}, true, part.Transport{Note: "none"}},
		{"no domain", &hv{missing: true}, false, part.Transport{Note: "none"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.Name = types.TransportDrive
			got := configdrive.New(tc.hv, dataDir, nil).Transport(context.Background(), app1, tc.running, 0)
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	got := configdrive.New(&hv{bus: "sata", live: broken}, dataDir, nil).Transport(context.Background(), app1, true, 0)
	if got.Revision != 0 || got.Note == "" {
		t.Errorf("an unreadable medium: %+v", got)
	}
	if got := configdrive.New(nil, dataDir, nil).Transport(context.Background(), app1, true, 0); got.Note != "none" {
		t.Errorf("no hypervisor: %+v", got)
	}
}
