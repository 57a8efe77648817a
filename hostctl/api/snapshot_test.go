package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// TestSnapshotAPI: POST /v1/instances/{name}/snapshot is for
// administrators and the instance's project members; bad input is a 400 naming the field; an instance this
// host made no disk for (no hypervisor) is a 409; an unknown instance a
// 404. (The snapshots themselves are tested against the real qemu-img in
// hostctl/controller: TestSnapshotEncryptionKeys.)
func TestSnapshotAPI(t *testing.T) {
	ctx := context.Background()
	admin, alice, bob, _ := tcpAPI(t)
	if _, err := admin.Apply(ctx, []byte("name: a1\nproject_id: a\n")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		req    types.SnapshotRequest
		status int
		want   string
	}{
		{"no name", types.SnapshotRequest{}, http.StatusBadRequest, "name"},
		{"bad key", types.SnapshotRequest{Image: "s1", EncryptionKey: "maybe"}, http.StatusBadRequest, "encryption_key"},
		{"existing without secret", types.SnapshotRequest{Image: "s1", EncryptionKey: "existing"}, http.StatusBadRequest, "secret_uuid"},
		{"bad image name", types.SnapshotRequest{Image: "../s1"}, http.StatusBadRequest, "name"},
		{"no disks", types.SnapshotRequest{Image: "s1"}, http.StatusConflict, "without a hypervisor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := admin.Snapshot(ctx, "a1", tc.req)
			if status(err) != tc.status || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("snapshot = %v, want %d naming %s", err, tc.status, tc.want)
			}
		})
	}
	// A member snapshots its own project's instances (here refused only
	// because no hypervisor made a disk), never another project's.
	if _, err := alice.Snapshot(ctx, "a1", types.SnapshotRequest{Image: "s1"}); status(err) != http.StatusConflict || !strings.Contains(err.Error(), "without a hypervisor") {
		t.Errorf("member snapshot of its own instance: %v", err)
	}
	if _, err := bob.Snapshot(ctx, "a1", types.SnapshotRequest{Image: "s1"}); status(err) != http.StatusNotFound {
		t.Errorf("member snapshot of another project's instance: %v", err)
	}
	if _, err := admin.Snapshot(ctx, "nope", types.SnapshotRequest{Image: "s1"}); status(err) != http.StatusNotFound {
		t.Errorf("unknown instance: %v", err)
	}
}
