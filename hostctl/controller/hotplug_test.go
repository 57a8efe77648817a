package controller

// Tests of disk and NIC hot-plug (hostctl/ops, hotplug.go, driven through
// export_ops_test.go) against the fake hypervisor.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/metadata"
)

func TestFaultsDevices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, running := range []bool{false, true} {
		setup := func(e *env) {
			e.mustApply(hvSpec)
			if running {
				if _, err := e.c.Start(ctx, "app-1"); err != nil {
					e.t.Fatal(err)
				}
			}
		}
		ops := map[string]func(e *env) error{
			"attach-disk": func(e *env) error {
				_, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "hot", Bus: "scsi", Size: "8M", Serial: "hot-1"})
				return err
			},
			"detach-disk": func(e *env) error {
				_, err := e.c.DetachDisk(ctx, "app-1", types.DetachRequest{Tag: "db"})
				return err
			},
			"attach-nic": func(e *env) error {
				_, err := e.c.AttachNIC(ctx, "app-1", types.NICRequest{Tag: "hotnic", MAC: "52:54:00:00:00:09"})
				return err
			},
			"detach-nic": func(e *env) error {
				_, err := e.c.DetachNIC(ctx, "app-1", types.DetachRequest{Tag: "back"})
				return err
			},
		}
		for name, op := range ops {
			t.Run(fmt.Sprintf("%s/running=%t", name, running), func(t *testing.T) {
				faultMatrix(t, setup, op)
			})
		}
	}
}

func TestAttachDetach(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.mustApply(hvSpec)
	// Shut off: the persistent configuration.
	inst, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "hot", Bus: "scsi", Size: "8M", Serial: "hot-1"})
	if err != nil {
		t.Fatal(err)
	}
	hot := findDevice(inst.Devices, "hot")
	if hot == nil || hot.Bus != "scsi" || hot.Address == "" || hot.Serial != "hot-1" {
		t.Fatalf("attached disk in metadata: %+v", hot)
	}
	if got := devicesOf(t, e.st, inst.Spec.UUID); findDevice(got, "hot") == nil {
		t.Error("published metadata lacks the attached disk")
	}
	tree, _, err := configdrive.Read(filepath.Join(e.dir, "instances", "app-1", "disk.config"))
	if err != nil {
		t.Fatal(err)
	}
	if md, _ := tree.Get("openstack/latest/meta_data.json"); !strings.Contains(string(md), `"hot"`) {
		t.Error("config drive lacks the attached disk")
	}
	target := inst.Spec.Disks[len(inst.Spec.Disks)-1].Name
	img := filepath.Join(e.dir, "instances", "app-1", "disk-"+target+".qcow2")
	if _, err := os.Stat(img); err != nil {
		t.Fatal(err)
	}
	// Running: live and persistent.
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	inst, err = e.c.AttachNIC(ctx, "app-1", types.NICRequest{Tag: "hotnic"})
	if err != nil {
		t.Fatal(err)
	}
	if n := findDevice(inst.Devices, "hotnic"); n == nil || !strings.HasPrefix(n.MAC, "52:54:00:") || n.Address == "" {
		t.Fatalf("attached NIC: %+v", n)
	}
	if inst, err = e.c.DetachDisk(ctx, "app-1", types.DetachRequest{Tag: "hot"}); err != nil {
		t.Fatal(err)
	}
	if findDevice(inst.Devices, "hot") != nil {
		t.Error("detached disk still in the metadata")
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("detached disk's image: %v", err)
	}
	if inst, err = e.c.DetachNIC(ctx, "app-1", types.DetachRequest{Tag: "hotnic"}); err != nil {
		t.Fatal(err)
	}
	if findDevice(inst.Devices, "hotnic") != nil {
		t.Error("detached NIC still in the metadata")
	}
}

func findDevice(devs []metadata.Device, tag string) *metadata.Device {
	for i, d := range devs {
		if slices.Contains(d.Tags, tag) {
			return &devs[i]
		}
	}
	return nil
}
