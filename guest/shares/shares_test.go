package shares_test

import (
	"testing"

	"github.com/vmeta/vmeta/guest/shares"
)

const mountinfo = `22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
28 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
40 28 0:36 / /mnt/shares/shared-data rw,relatime shared:20 - virtiofs shared-data rw
41 28 0:37 / /mnt/with\040space rw,relatime - virtiofs other rw
42 28 0:38 / /mnt/shares/x rw,relatime - tmpfs tmpfs rw
43 28 0:39 / /mnt/shares/x rw,relatime - virtiofs x rw
garbage line
`

func TestParseMountInfo(t *testing.T) {
	ms := shares.ParseMountInfo([]byte(mountinfo))
	if len(ms) != 6 {
		t.Fatalf("%d mounts: %+v", len(ms), ms)
	}
	if m := ms[2]; m.Source != "shared-data" || m.Target != "/mnt/shares/shared-data" || m.FSType != "virtiofs" {
		t.Errorf("%+v", m)
	}
	if ms[3].Target != "/mnt/with space" {
		t.Errorf("escaped space: %q", ms[3].Target)
	}
	if got := shares.TagMounts(ms, "other"); len(got) != 1 || got[0] != "/mnt/with space" {
		t.Errorf("TagMounts: %v", got)
	}
	if m, ok := shares.MountedAt(ms, "/mnt/shares/x"); !ok || m.FSType != "virtiofs" {
		t.Errorf("MountedAt takes the top of the stack: %+v", m)
	}
	if _, ok := shares.MountedAt(ms, "/mnt/nothing"); ok {
		t.Error("MountedAt found nothing")
	}
}

func TestSystemMounts(t *testing.T) {
	ms, err := shares.System{}.Mounts()
	if err != nil || len(ms) == 0 {
		t.Fatalf("%v %v", ms, err)
	}
	if _, ok := shares.MountedAt(ms, "/"); !ok {
		t.Error("no root mount")
	}
}
