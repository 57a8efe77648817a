package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/internal/errkind"
)

// A disk attached with an explicit encrypted=false to an instance whose
// flavor encrypts is refused with a conflict naming the disk and the
// flavor, as a spec's explicit false is (it was silently encrypted);
// nothing is attached. Without the flag the disk follows the flavor.
func TestAttachExplicitUnencrypted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flavorSetup(e)
	withFakeEncryption(t, e)
	ctx := context.Background()
	if _, err := e.Catalog().CreateFlavor(ctx, flavors.Flavor{Name: "f.enc", VCPUs: 1, RAM: 128, Disk: 1,
		ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "on"}}); err != nil {
		t.Fatal(err)
	}
	e.mustApply(strings.Replace(flavorSpec, "flavor: f.small", "flavor: f.enc", 1))
	before := e.snapshot()
	no, yes := false, true
	_, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "plain", Size: "8M", Encrypted: &no})
	if !errors.Is(err, errkind.Conflict) || !strings.Contains(err.Error(), "encrypted=false") || !strings.Contains(err.Error(), "f.enc") {
		t.Fatalf("explicit encrypted=false under an encrypting flavor: %v; want a conflict naming the disk and the flavor", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused attach changed something:\n%s", diffLines(before, after))
	}
	for _, req := range []types.DiskRequest{{Tag: "asked", Size: "8M", Encrypted: &yes}, {Tag: "left-out", Size: "8M"}} {
		inst, err := e.c.AttachDisk(ctx, "app-1", req)
		if err != nil {
			t.Fatalf("attach %s: %v", req.Tag, err)
		}
		for _, d := range inst.Spec.Disks {
			if d.Tag == req.Tag && (!d.Encrypted || d.EncryptionFormat != "luks") {
				t.Errorf("disk %s (%s): encrypted %t format %q", d.Name, d.Tag, d.Encrypted, d.EncryptionFormat)
			}
		}
	}
}

func boolp(b bool) *bool { return &b }
