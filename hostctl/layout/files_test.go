package layout_test

import (
	"testing"

	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/internal/model"
)

// TestDiskFile: a flavor's disks have Nova's file names, every other
// disk disk-<target>.qcow2 (the names the core, the disks part and the
// operations share).
func TestDiskFile(t *testing.T) {
	for _, tc := range []struct {
		d    model.Disk
		want string
	}{
		{model.Disk{Name: "vda", Kind: model.DiskKindRoot}, "disk"},
		{model.Disk{Name: "vdb", Kind: model.DiskKindEphemeral}, "disk.eph0"},
		{model.Disk{Name: "vdc", Kind: model.DiskKindSwap}, "disk.swap"},
		{model.Disk{Name: "sdb"}, "disk-sdb.qcow2"},
	} {
		if got := layout.DiskFile(tc.d); got != tc.want {
			t.Errorf("DiskFile(%+v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
