package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/virt"
)

// The rescue domain's own start brings the instance's fixed DHCP lease to
// the running network (hostctl/parts/nics: Prepare of rescue), as every
// other start does: an instance stopped before its lease ever went live
// (an apply writes the network's definition only) is rescued with its
// lease live; a rescue whose start fails takes it back off.
func TestRescueMakesLeaseLive(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(e.dir, "images"), 0o750); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "plain.qcow2")
	if err := images.New(t.TempDir(), images.Options{QemuImg: e.qemuImg}).Create(ctx, images.Disk{Path: p, Size: "8M"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Catalog().ImportImage(ctx, "plain-img", nil, strings.NewReader(string(b))); err != nil {
		t.Fatal(err)
	}
	e.mustApply("name: vm1\naddresses: [10.1.0.7]\ndisks: [{name: vda, size: 8M, tag: root}]\nnics: [{mac: \"52:54:00:00:00:01\"}]\n")
	lease := virt.DHCPHost{MAC: "52:54:00:00:00:01", IP: "10.1.0.7"}
	if lv := e.hv.liveOf("default"); len(lv) != 0 {
		t.Fatalf("the running network has %v before any start", lv)
	}

	e.hv.failStarts = 1
	if _, err := e.c.Rescue(ctx, "vm1", RescueRequest{Image: "plain-img"}); !errors.Is(err, errInjected) {
		t.Fatalf("rescue with the start failing = %v", err)
	}
	if lv := e.hv.liveOf("default"); len(lv) != 0 {
		t.Errorf("the failed rescue left the lease live: %v", lv)
	}

	if _, err := e.c.Rescue(ctx, "vm1", RescueRequest{Image: "plain-img"}); err != nil {
		t.Fatal(err)
	}
	if !e.hv.domains["vm1"].running {
		t.Fatal("the rescue domain does not run")
	}
	if lv := e.hv.liveOf("default"); !slices.Equal(lv, []virt.DHCPHost{lease}) {
		t.Errorf("running network during the rescue: %v, want %v", lv, lease)
	}
}
