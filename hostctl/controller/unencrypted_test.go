package controller

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/store"
)

// TestExplicitUnencryptedConflict (issue 20, item 3): a spec disk saying
// `encrypted: false` under a flavor or an image that asks for ephemeral
// encryption is refused with a 409 naming the disk, the flavor or image
// and both values, and nothing is made; leaving encrypted out gets the
// disk encrypted.
func TestExplicitUnencryptedConflict(t *testing.T) {
	e := newEnv(t)
	flavorSetup(e)
	withFakeEncryption(t, e)
	ctx := context.Background()
	if _, err := e.Catalog().CreateFlavor(ctx, flavors.Flavor{Name: "f.encs", VCPUs: 1, RAM: 128, Disk: 1,
		ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "true"}}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "plain.qcow2")
	if err := images.New(t.TempDir(), images.Options{QemuImg: e.qemuImg}).Create(ctx, images.Disk{Path: p, Size: "16M"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Catalog().ImportImage(ctx, "img-enc", map[string]string{"hw_ephemeral_encryption": "true"}, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"flavor", "name: app-1\nflavor: f.encs\nimage: deb\nproject_id: p1\n" +
			"disks: [{name: vda, kind: root, tag: root}, {name: sda, bus: scsi, size: 8M, tag: db, encrypted: false}]\n",
			[]string{"disks[1] (sda)", "encrypted=false", `flavor "f.encs" (hw:ephemeral_encryption=true)`, "encrypted=true"}},
		{"image", "name: app-2\nimage: img-enc\nproject_id: p1\ndisks: [{name: vda, size: 16M, encrypted: false}]\n",
			[]string{"disks[0] (vda)", "encrypted=false", `image "img-enc" (hw_ephemeral_encryption=true)`, "encrypted=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.apply(tc.spec)
			if !errors.Is(err, store.ErrConflict) {
				t.Fatalf("apply = %v, want a conflict (409)", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("apply = %v, want it to name %q", err, w)
				}
			}
		})
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused applies left changes:\n%s", diffLines(before, after))
	}
	// Without the explicit false, the flavor's encryption applies.
	inst := e.mustApply("name: app-1\nflavor: f.encs\nimage: deb\nproject_id: p1\n" +
		"disks: [{name: vda, kind: root, tag: root}, {name: sda, bus: scsi, size: 8M, tag: db}]\n")
	for _, d := range inst.Spec.Disks {
		if !d.Encrypted {
			t.Errorf("disk %s not encrypted under an encrypting flavor", d.Name)
		}
	}
}
