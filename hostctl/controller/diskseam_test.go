package controller_test

import (
	"reflect"
	"testing"

	"github.com/vmeta/vmeta/hostctl/controller"
)

// TestCoreHoldsNoDiskHandles (issue 22, items 1 and 2): the core calls the
// disks part (hostctl/parts/disks) through one narrow interface of what
// it calls itself, and neither holds nor forwards the disk layer's
// handles — the key manager, the LUKS tool, libvirt's secrets, the image
// catalog, the flavor registry, the secret rule: the daemon wires the
// disks part, hostctl/ops, hostctl/catalog and hostctl/diskrotate with
// them directly.
func TestCoreHoldsNoDiskHandles(t *testing.T) {
	if n := reflect.TypeFor[controller.Disks]().NumMethod(); n > 6 {
		t.Errorf("controller.Disks has %d methods, want at most 6 (what the core itself calls)", n)
	}
	ct := reflect.TypeFor[*controller.Controller]()
	for _, m := range []string{"Encryption", "LibvirtSecrets", "Records", "DiskImages", "Image", "BlankTemplate",
		"EncryptionPolicy", "States", "DiskPart", "FlavorRegistry", "ImageDir", "FlavorUsers", "ImageUsers",
		"ReleaseSecret", "LockSecret", "DiskPath", "InstanceExists"} {
		if _, ok := ct.MethodByName(m); ok {
			t.Errorf("the core forwards the disk layer's %s", m)
		}
	}
	ot := reflect.TypeFor[controller.Options]()
	for _, f := range []string{"Keys", "LUKS", "LUKSIterTime", "EncryptionSupport", "Disks"} {
		if _, ok := ot.FieldByName(f); ok {
			t.Errorf("controller.Options takes the disk layer's %s", f)
		}
	}
}
