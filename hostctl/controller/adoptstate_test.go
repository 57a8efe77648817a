package controller

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/revert"
)

// downHosts says every host but up is down.
type downHosts struct{ up string }

func (d downHosts) HostDown(_ context.Context, host string) (bool, string, error) {
	return host != d.up, "stopped", nil
}
func (downHosts) List(context.Context) ([]types.HostStatus, error) { return nil, nil }

// TestAdoptAndForceDeleteKnowTheState: a shelved instance is adopted only
// where its shelved image is (refused naming it, nothing changed, until
// it is imported; then it stays shelved); a rescued one leaves the rescue
// of its dead host; delete --force-from-store of either removes its state
// record and names what stays on the dead host. The hosts register the
// vmstate part, as the daemon does (withStates).
func TestAdoptAndForceDeleteKnowTheState(t *testing.T) {
	e := newEnv(t)
	e.c.hostName = "host-a"
	ctx := context.Background()
	e.mustApply("name: vm1\naddresses: [10.1.0.21]\ndisks: [{name: vda, size: 8M}]\n")
	e.mustApply("name: vm2\naddresses: [10.1.0.22]\ndisks: [{name: vda, size: 8M}]\n")
	if _, err := e.c.Shelve(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	rec2, err := e.st.Instance(ctx, "vm2")
	if err != nil {
		t.Fatal(err)
	}
	r := revert.New(e.c.log, "test")
	if err := e.c.putVMState(ctx, r, rec2.UUID, vmState{Instance: "vm2", State: StateRescue, RescueImage: "rescue-img"}); err != nil {
		t.Fatal(err)
	}
	r.Success()

	bdir := t.TempDir()
	b := withStates(newController(e.st, Options{DataDir: bdir, Logger: slog.New(slog.DiscardHandler), Host: "host-b", Hosts: downHosts{up: "host-b"}, QemuImg: e.qemuImg}))
	withDiskPart(b, e.qemuImg) // host-b's catalog imports the shelved image over its disks part, as the daemon wires it

	// Shelved, the image only in host-a's catalog: refused, naming it.
	if _, err := b.Adopt(ctx, "vm1"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "image vm1-shelved of host host-a's catalog") {
		t.Fatalf("adopt of a shelved instance without its image = %v", err)
	}
	if rec, _ := e.st.Instance(ctx, "vm1"); rec.Host != "host-a" {
		t.Fatalf("a refused adopt moved the record to %q", rec.Host)
	}
	img, err := e.c.imageDir.Lookup(ctx, ShelvedImageName("vm1"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(img.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := b.catalog().ImportImage(ctx, ShelvedImageName("vm1"), nil, f); err != nil {
		t.Fatal(err)
	}
	got, err := b.Adopt(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Host != "host-b" || got.State != StateShelved {
		t.Fatalf("adopted shelved instance: host %q state %q, want host-b %s", got.Host, got.State, StateShelved)
	}
	if _, err := os.Stat(filepath.Join(bdir, "instances", "vm1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("adopting a shelved instance made its directory: %v", err)
	}

	// Rescued on the dead host: the adopted instance is out of rescue.
	got, err = b.Adopt(ctx, "vm2")
	if err != nil {
		t.Fatal(err)
	}
	if got.State == StateRescue {
		t.Fatalf("adopted rescued instance still in rescue")
	}
	if st, _, _ := b.vmStateOf(ctx, rec2.UUID); st.State != "" {
		t.Fatalf("state record after adopt: %+v", st)
	}

	// Force-delete from a third host while host-b is down: the shelve's
	// state record goes, the image left is named.
	c3 := withStates(newController(e.st, Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler), Host: "host-c", Hosts: downHosts{up: "host-c"}, QemuImg: e.qemuImg}))
	rec1, _ := e.st.Instance(ctx, "vm1")
	left, err := c3.ForceDeleteFromStore(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(left, "\n"), "the shelved image vm1-shelved in host host-b's image catalog") {
		t.Errorf("left = %q, want the shelved image named", left)
	}
	if st, _, _ := c3.vmStateOf(ctx, rec1.UUID); st.State != "" {
		t.Errorf("state record after force delete: %+v", st)
	}
}
