package model

import (
	"slices"
	"testing"
)

func TestHardwareChanges(t *testing.T) {
	base := func() *Instance {
		return &Instance{
			VCPUs: 1, MemoryMiB: 512,
			Disks: []Disk{{Name: "vda", Bus: "virtio", Size: "1G", Address: "0000:00:04.0"}},
			NICs:  []NIC{{MAC: "52:54:00:00:00:01", Network: "default", Address: "0000:00:03.0"}},
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*Instance)
		want []string
	}{
		{"unchanged", func(*Instance) {}, nil},
		{"tags are not hardware", func(in *Instance) { in.Disks[0].Tag = "root"; in.NICs[0].Tag = "up" }, nil},
		{"vcpus and memory", func(in *Instance) { in.VCPUs = 2; in.MemoryMiB = 1024 },
			[]string{"vcpus 1 -> 2", "memory 512 MiB -> 1024 MiB"}},
		{"disk bus", func(in *Instance) { in.Disks[0].Bus = "scsi" }, []string{"disk vda: bus virtio -> scsi"}},
		{"disk added and removed", func(in *Instance) { in.Disks[0].Name = "vdb" },
			[]string{"disk vdb added", "disk vda removed"}},
		{"nic network", func(in *Instance) { in.NICs[0].Network = "other" },
			[]string{`NIC 52:54:00:00:00:01: network "default" -> "other"`}},
		{"nic replaced", func(in *Instance) { in.NICs[0].MAC = "52:54:00:00:00:02" },
			[]string{"NIC 52:54:00:00:00:02 added", "NIC 52:54:00:00:00:01 removed"}},
		{"pci devices", func(in *Instance) { in.PCIDevices = []PCIDevice{{Address: "0000:01:00.0"}} },
			[]string{"pci_devices changed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, in := base(), base()
			in.Disks[0].Address, in.NICs[0].Address = "", ""
			tc.edit(in)
			CarryOver(old, in)
			if got := HardwareChanges(old, in); !slices.Equal(got, tc.want) {
				t.Errorf("HardwareChanges = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCarryOverKeepsAddresses(t *testing.T) {
	old := &Instance{Disks: []Disk{{Name: "vda", Bus: "virtio", Address: "0000:00:04.0"}}, NICs: []NIC{{MAC: "52:54:00:00:00:01", Address: "0000:00:03.0"}}}
	in := &Instance{Disks: []Disk{{Name: "vda", Bus: "virtio"}, {Name: "vdb", Bus: "virtio"}}, NICs: []NIC{{MAC: "52:54:00:00:00:01"}}}
	CarryOver(old, in)
	if in.Disks[0].Address != "0000:00:04.0" || in.Disks[1].Address != "" || in.NICs[0].Address != "0000:00:03.0" {
		t.Errorf("after CarryOver: disks %+v, nics %+v", in.Disks, in.NICs)
	}
}

func TestSizeChanges(t *testing.T) {
	old := &Instance{Disks: []Disk{{Name: "vda", Size: "1G"}}}
	in := &Instance{Disks: []Disk{{Name: "vdb", Size: "2G"}, {Name: "vda", Size: "2G"}}}
	got := SizeChanges(old, in)
	if len(got) != 1 || got[0].Field != "disks[1].size" || got[0].Value != "2G" {
		t.Fatalf("SizeChanges = %+v, want one error on disks[1].size", got)
	}
}
