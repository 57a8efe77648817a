package ops

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/model"
)

// The operations' own checks, without a core. The operations themselves
// are tested over the real core and the fake hypervisor in
// hostctl/controller (shelve_test.go, snapshot_test.go, fault_test.go,
// flavors_faults_test.go, ...: they drive this package through
// ops_wiring_test.go) and over libvirt (shelve_libvirt_test.go).

// TestCheckSnapshot: a snapshot request is refused naming field, value
// and rule; encryption_key defaults to same.
func TestCheckSnapshot(t *testing.T) {
	for _, tt := range []struct {
		name    string
		req     types.SnapshotRequest
		want    string // "" for no error; else a field the error names
		wantKey string
	}{
		{"default key", types.SnapshotRequest{Image: "img"}, "", types.SnapshotKeySame},
		{"new", types.SnapshotRequest{Image: "img", EncryptionKey: types.SnapshotKeyNew}, "", types.SnapshotKeyNew},
		{"existing", types.SnapshotRequest{Image: "img", EncryptionKey: types.SnapshotKeyExisting, SecretUUID: "s"}, "", types.SnapshotKeyExisting},
		{"bad name", types.SnapshotRequest{Image: "../x"}, "name", ""},
		{"existing without a secret", types.SnapshotRequest{Image: "img", EncryptionKey: types.SnapshotKeyExisting}, "secret_uuid", ""},
		{"a secret for none", types.SnapshotRequest{Image: "img", EncryptionKey: types.SnapshotKeyNone, SecretUUID: "s"}, "secret_uuid", ""},
		{"unknown key", types.SnapshotRequest{Image: "img", EncryptionKey: "maybe"}, "encryption_key", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req
			err := checkSnapshot(&req)
			if tt.want == "" {
				if err != nil || req.EncryptionKey != tt.wantKey {
					t.Fatalf("checkSnapshot(%+v) = %v, key %q; want nil, key %q", tt.req, err, req.EncryptionKey, tt.wantKey)
				}
				return
			}
			var se *model.SpecError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("checkSnapshot(%+v) = %v; want a spec error naming %s", tt.req, err, tt.want)
			}
		})
	}
}

// TestCheckRescue: a rescue request needs a valid image name and a
// timeout that is not negative.
func TestCheckRescue(t *testing.T) {
	for _, tt := range []struct {
		req  types.RescueRequest
		want string
	}{
		{types.RescueRequest{Image: "rescue-img"}, ""},
		{types.RescueRequest{Image: "rescue-img", TimeoutSeconds: 2.5}, ""},
		{types.RescueRequest{}, "image"},
		{types.RescueRequest{Image: "a/b"}, "image"},
		{types.RescueRequest{Image: "rescue-img", TimeoutSeconds: -1}, "timeout_seconds"},
	} {
		err := checkRescue(tt.req)
		var se *model.SpecError
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("checkRescue(%+v) = %v", tt.req, err)
		case tt.want != "" && (!errors.As(err, &se) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("checkRescue(%+v) = %v; want a spec error naming %s", tt.req, err, tt.want)
		}
	}
}

// TestNextTarget: the rescue layout moves the root disk to the next
// target name of its bus; a name with none is an ErrState error.
func TestNextTarget(t *testing.T) {
	for in, want := range map[string]string{"vda": "vdb", "sdc": "sdd", "hdy": "hdz"} {
		if got, err := nextTarget(in); err != nil || got != want {
			t.Errorf("nextTarget(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "vdz", "vd1"} {
		if got, err := nextTarget(in); !errors.Is(err, controller.ErrState) {
			t.Errorf("nextTarget(%q) = %q, %v; want ErrState", in, got, err)
		}
	}
}

// TestWithSizesOf: the spec a resize applies over has the grown disks'
// sizes and is a copy (the stored spec is not changed).
func TestWithSizesOf(t *testing.T) {
	old := &model.Instance{Name: "a", Disks: []model.Disk{{Name: "vda", Size: "1G"}, {Name: "vdb", Size: "2G"}}}
	in := &model.Instance{Name: "a", Disks: []model.Disk{{Name: "vda", Size: "4G"}, {Name: "vdc", Size: "8G"}}}
	got := withSizesOf(old, in)
	if got.Disks[0].Size != "4G" || got.Disks[1].Size != "2G" || len(got.Disks) != 2 {
		t.Errorf("withSizesOf = %+v; want vda 4G, vdb 2G", got.Disks)
	}
	if old.Disks[0].Size != "1G" {
		t.Errorf("withSizesOf changed old: %+v", old.Disks)
	}
}
