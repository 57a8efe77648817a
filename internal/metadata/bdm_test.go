package metadata_test

import (
	"testing"

	"github.com/vmeta/vmeta/internal/model"
)

// A flavor's disks are named as Nova names them in the EC2
// block-device-mapping; the spec's other disks are volumes.
func TestBlockDeviceMappingKinds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		disks []model.Disk
		want  string
	}{
		{"flavor disks and a volume", []model.Disk{
			{Name: "vda", Kind: model.DiskKindRoot}, {Name: "vdb", Kind: model.DiskKindEphemeral},
			{Name: "vdc", Kind: model.DiskKindSwap}, {Name: "sda", Bus: "scsi", Tag: "oracledb"},
		}, `{"ami":"vda","ebs0":"/dev/sda","ephemeral0":"/dev/vdb","root":"/dev/vda","swap":"/dev/vdc"}`},
		{"no root disk, swap only", []model.Disk{{Name: "vdb", Kind: model.DiskKindSwap}, {Name: "vdc"}},
			`{"ebs0":"/dev/vdc","swap":"/dev/vdb"}`},
		{"without kinds: the first disk is the root", []model.Disk{{Name: "vda"}, {Name: "vdb"}},
			`{"ami":"vda","ebs0":"/dev/vdb","root":"/dev/vda"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &model.Instance{Name: "bdm", UUID: "5a1b2c3d-0000-4000-8000-00000000abcd", Disks: tc.disks}
			tr := render(t, in)
			md := decodeObject(t, tr.Files["ec2/latest/meta-data.json"])
			if got := string(md["block-device-mapping"]); got != tc.want {
				t.Errorf("block-device-mapping = %s, want %s", got, tc.want)
			}
		})
	}
}
