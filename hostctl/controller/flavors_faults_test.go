package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/testenv"
)

// flavorSetup imports an image (real qemu-img) and creates flavors, and
// makes the blank-disk templates the operations use (a cache every
// instance shares, not part of what an operation undoes).
func flavorSetup(e *env) {
	e.t.Helper()
	ctx := context.Background()
	// A flavor disk grown by a resize and shrunk back by its undo is the
	// same disk (size, backing file, allocation) but not the same bytes
	// (qcow2 keeps its larger L1 table): such files are compared by what
	// qemu-img says of them.
	e.fileView = func(p string) (string, bool) {
		if filepath.Base(p) != "disk" {
			return "", false
		}
		info, err := exec.Command(e.qemuImg, "info", "--output=json", "-U", p).Output()
		if err != nil {
			return "", false
		}
		var v struct {
			VirtualSize int64  `json:"virtual-size"`
			Backing     string `json:"backing-filename"`
		}
		if json.Unmarshal(info, &v) != nil {
			return "", false
		}
		m, err := exec.Command(e.qemuImg, "map", "--output=json", "-U", p).Output()
		if err != nil {
			return "", false
		}
		return fmt.Sprintf("qcow2 %d over %s, map %x", v.VirtualSize, v.Backing, sha256.Sum256(m)), true
	}
	testenv.LookPath(e.t, "mkswap")
	for _, name := range []string{"deb", "deb2"} {
		p := filepath.Join(e.t.TempDir(), "src")
		if out, err := exec.Command(e.qemuImg, "create", "-q", "-f", "qcow2", p, "16M").CombinedOutput(); err != nil {
			e.t.Fatalf("%v: %s", err, out)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.Catalog().ImportImage(ctx, name, nil, bytes.NewReader(b)); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, f := range []flavors.Flavor{
		{Name: "f.small", VCPUs: 1, RAM: 128, Disk: 1, Swap: 16},
		{Name: "f.big", VCPUs: 2, RAM: 256, Disk: 2, Swap: 32},
	} {
		if _, err := e.Catalog().CreateFlavor(ctx, f); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, mib := range []int{16, 32} {
		if _, err := e.dp().Templates.Template(ctx, images.TemplateSwap, mib); err != nil {
			e.t.Fatal(err)
		}
	}
}

const flavorSpec = "name: app-1\nflavor: f.small\nimage: deb\naddresses: [10.1.0.8]\n" +
	"disks: [{name: vda, kind: root, tag: root}, {name: sda, bus: scsi, size: 8M, tag: db}]\n" +
	"nics: [{mac: \"52:54:00:00:00:11\", tag: front}]\n"

// Applying an instance from a flavor, resizing it and rebuilding it:
// every hypervisor call, the store write and qemu-img failing in turn
// leave the store, the data directory and libvirt as they were.
func TestFaultsFlavorApply(t *testing.T) {
	faultMatrix(t, flavorSetup, func(e *env) error { _, err := e.apply(flavorSpec); return err })
}

func TestFaultsResize(t *testing.T) {
	faultMatrix(t, func(e *env) { flavorSetup(e); e.mustApply(flavorSpec) },
		func(e *env) error { _, err := e.c.Resize(context.Background(), "app-1", "f.big"); return err })
}

func TestFaultsRebuild(t *testing.T) {
	faultMatrix(t, func(e *env) { flavorSetup(e); e.mustApply(flavorSpec) },
		func(e *env) error { _, err := e.c.Rebuild(context.Background(), "app-1", "deb2"); return err })
}

// A running instance is neither resized nor rebuilt, and nothing changes.
func TestResizeRebuildNeedStopped(t *testing.T) {
	e := newEnv(t)
	flavorSetup(e)
	e.mustApply(flavorSpec)
	if _, err := e.c.Start(context.Background(), "app-1"); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	if _, err := e.c.Resize(context.Background(), "app-1", "f.big"); err == nil {
		t.Error("resize of a running instance")
	}
	if _, err := e.c.Rebuild(context.Background(), "app-1", "deb2"); err == nil {
		t.Error("rebuild of a running instance")
	}
	if after := e.snapshot(); after != before {
		t.Errorf("changes:\n%s", diffLines(before, after))
	}
}

// An instance laid out by a flavor keeps its flavor and image on a
// re-apply (resize and rebuild change them), and its flavor disks are
// not detached like volumes; a re-apply of the same spec is fine.
func TestFlavorInstanceGuards(t *testing.T) {
	e := newEnv(t)
	flavorSetup(e)
	e.mustApply(flavorSpec)
	before := e.snapshot()
	for _, spec := range []string{
		strings.Replace(flavorSpec, "flavor: f.small", "flavor: f.big", 1),
		strings.Replace(flavorSpec, "image: deb", "image: deb2", 1),
	} {
		if _, err := e.apply(spec); !errors.Is(err, ErrState) {
			t.Errorf("re-apply with another flavor or image: %v", err)
		}
	}
	if _, err := e.c.DetachDisk(context.Background(), "app-1", types.DetachRequest{Tag: "root"}); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "the flavor's root disk") {
		t.Errorf("detach the root disk: %v", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("changes:\n%s", diffLines(before, after))
	}
	inst := e.mustApply(flavorSpec)
	if len(inst.Spec.Disks) != 3 || inst.Spec.Disks[1].Kind != "swap" || inst.Spec.Disks[2].Tag != "db" {
		t.Errorf("re-applied = %+v", inst.Spec.Disks)
	}
}

// A disk attached later to an instance whose flavor asks for encryption is
// asked to be encrypted too.
func TestAttachedDiskFollowsPolicy(t *testing.T) {
	e := newEnv(t)
	flavorSetup(e)
	withFakeEncryption(t, e) // the disks are made encrypted (encryption_test.go)
	if _, err := e.Catalog().CreateFlavor(context.Background(), flavors.Flavor{Name: "f.enc", VCPUs: 1, RAM: 128, Disk: 1,
		ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "on"}}); err != nil {
		t.Fatal(err)
	}
	e.mustApply(strings.Replace(flavorSpec, "flavor: f.small", "flavor: f.enc", 1))
	inst, err := e.c.AttachDisk(context.Background(), "app-1", types.DiskRequest{Tag: "later", Size: "8M"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inst.Spec.Disks {
		if !d.Encrypted || d.EncryptionFormat != "luks" {
			t.Errorf("disk %s (%s): encrypted %t format %q", d.Name, d.Tag, d.Encrypted, d.EncryptionFormat)
		}
	}
}

// An instance made while its flavor was only a label keeps its spec's
// disks and size when a flavor of that name is registered later.
func TestFlavorRegisteredLater(t *testing.T) {
	e := newEnv(t)
	flavorSetup(e)
	const spec = "name: old-1\nflavor: f.later\nimage: deb\ndisks: [{name: vda, tag: root}, {name: vdb, size: 8M}]\n"
	e.mustApply(spec)
	if _, err := e.Catalog().CreateFlavor(context.Background(), flavors.Flavor{Name: "f.later", VCPUs: 4, RAM: 512, Disk: 1, Ephemeral: 1,
		ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "true"}}); err != nil {
		t.Fatal(err)
	}
	inst := e.mustApply(spec)
	if len(inst.Spec.Disks) != 2 || hasKinds(inst.Spec) || inst.Spec.VCPUs != 0 || inst.Spec.Disks[0].Encrypted ||
		len(inst.Warnings) != 1 || !strings.Contains(inst.Warnings[0], "registered after") {
		t.Errorf("re-applied = %+v, warnings %q", inst.Spec, inst.Warnings)
	}
	if _, err := e.apply(strings.Replace(spec, "f.later", "f.small", 1)); !errors.Is(err, ErrState) {
		t.Errorf("moving it to a registered flavor by apply: %v", err)
	}
	if _, err := e.c.Resize(context.Background(), "old-1", "f.big"); !errors.Is(err, ErrState) {
		t.Errorf("resizing it: %v", err)
	}
	// A rebuild replaces its first disk, and the flavor's encryption
	// request does not reach its disks.
	inst, err := e.c.Rebuild(context.Background(), "old-1", "deb2")
	if err != nil {
		t.Fatal(err)
	}
	if inst.Spec.Image != "deb2" || inst.Spec.Disks[0].Encrypted || inst.Spec.Disks[1].Encrypted {
		t.Errorf("rebuilt = %+v", inst.Spec)
	}
}
