package model

import (
	"reflect"
	"testing"
)

func TestCloneIsDeep(t *testing.T) {
	in := &Instance{Name: "a", Disks: []Disk{{Name: "vda", Size: "1G", Unencrypted: true}}, NICs: []NIC{{MAC: "52:54:00:00:00:01"}}, Meta: map[string]string{"k": "v"}}
	out := in.Clone()
	want := *in
	want.Disks = []Disk{{Name: "vda", Size: "1G"}} // never stored, so never cloned
	if !reflect.DeepEqual(*out, want) {
		t.Fatalf("Clone = %+v, want %+v", *out, want)
	}
	out.Disks[0].Size, out.NICs[0].MAC, out.Meta["k"] = "2G", "52:54:00:00:00:02", "w"
	if in.Disks[0].Size != "1G" || in.NICs[0].MAC != "52:54:00:00:00:01" || in.Meta["k"] != "v" {
		t.Fatalf("changing the clone changed the original: %+v", in)
	}
}
