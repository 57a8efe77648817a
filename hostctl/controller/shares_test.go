package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/shares/hostdir"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
)

const shareID = "7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99"

func shareSpec(source string) string {
	return "name: sh-1\ndisks: [{name: vda, size: 8M, tag: root}]\n" +
		"shares: [{share_id: " + shareID + ", tag: shared-data, source: \"" + source + "\"}]\n"
}

// TestShares: a share whose source is a directory under the share root
// becomes a virtiofs filesystem of that directory (symbolic links
// resolved), the domain gets shared memory, and the guest's metadata
// lists the share.
func TestShares(t *testing.T) {
	e := newEnv(t)
	data := filepath.Join(e.dir, "shares", "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data", filepath.Join(e.dir, "shares", "current")); err != nil {
		t.Fatal(err)
	}
	inst := e.mustApply(shareSpec(filepath.Join(e.dir, "shares", "current")))
	doc, err := e.hv.XML(context.Background(), "sh-1", false)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(data)
	for _, want := range []string{
		`<filesystem type="mount" accessmode="passthrough">`, `<driver type="virtiofs">`,
		`<source dir="` + real + `">`, `<target dir="shared-data">`, `<alias name="ua-fs-shared-data">`,
		`<memoryBacking>`, `<source type="memfd">`, `<access mode="shared">`,
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("domain XML lacks %s:\n%s", want, doc)
		}
	}
	i := slices.IndexFunc(inst.Devices, func(d metadata.Device) bool { return d.Type == "share" })
	if i < 0 || inst.Devices[i].Tag != "shared-data" || inst.Devices[i].ShareID != shareID {
		t.Errorf("published devices %+v lack the share", inst.Devices)
	}
	if got := devicesOf(t, e.st, inst.Spec.UUID); !slices.ContainsFunc(got, func(d metadata.Device) bool { return d.Tag == "shared-data" }) {
		t.Errorf("published metadata %+v lacks the share", got)
	}

	// Another share root: the same directory is now outside it.
	e.c.shareRoot = hostdir.Root{Dir: t.TempDir()}
	if _, err := e.apply(shareSpec(data)); err == nil || !strings.Contains(err.Error(), "outside the share root") {
		t.Errorf("share outside the configured root: %v", err)
	}
}

// TestSharesRefused: share sources hostctl cannot export are refused
// before libvirt or a file is touched, each naming the field.
func TestSharesRefused(t *testing.T) {
	e := newEnv(t)
	root := filepath.Join(e.dir, "shares")
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	mutating := []string{"Define", "Remove", "Start", "Destroy", "AttachDevice", "DetachDevice", "UpdateDevice", "AddDHCPHost", "RemoveDHCPHost"}
	for _, tc := range []struct{ name, source, says string }{
		{"no source", "", "is required with a hypervisor"},
		// An NFS export is a share of the registry (hostctl share
		// create --proto nfs), which hostctl mounts: a source is a host
		// directory.
		{"NFS export", "nfs.example.com:/exports/data", "must be an absolute host directory"},
		{"NFS export, IPv6", "[fd00::5]:/exports/data", "must be an absolute host directory"},
		{"dot-dot", root + "/../../etc", "must not contain '..'"},
		{"relative", "shares/data", "must be an absolute host directory"},
		{"missing", filepath.Join(root, "nope"), "does not exist"},
		{"a file", filepath.Join(root, "file"), "is not a directory"},
		{"outside the root", outside, "outside the share root"},
		{"link out of the root", filepath.Join(root, "escape"), "resolves to " + outside},
		{"the root itself", root, "share root " + root + " itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot()
			calls := e.hv.callCount()
			_, err := e.apply(shareSpec(tc.source))
			var se *model.SpecError
			if !errors.Is(err, model.ErrInvalidSpec) || !errors.As(err, &se) || se.Errors[0].Field != "shares[0].source" || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v; want a spec error on shares[0].source saying %q", err, tc.says)
			}
			for _, c := range e.hv.calls[calls:] {
				if slices.Contains(mutating, c) {
					t.Errorf("libvirt was changed (%s) before the share was refused", c)
				}
			}
			if after := e.snapshot(); after != before {
				t.Errorf("refused share changed something:\n%s", diffLines(before, after))
			}
		})
	}
}
