package shares

import (
	"context"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
)

// TestEvacuateMovesMappings: once an evacuation took an instance over
// (its record the new host's), the part's Committed for part.Evacuate
// moves its share mappings to the new host, inactive (the new host's
// start mounts them), as for an adopt.
func TestEvacuateMovesMappings(t *testing.T) {
	st := stores(t)["bolt"](t)
	a := newEnv(t, st)
	ctx := context.Background()
	u := a.instance("a", "demo")
	id := a.localShare("demo")
	a.attach("a", id)
	if err := a.svc.PrepareStart(ctx, u); err != nil {
		t.Fatal(err)
	}
	a.svc.StartDone(ctx, u, nil) // running on host-a when host-a dies
	b := newEnvWith(t, st, func(_ string, o *controller.Options) { o.Host, o.Hosts = "host-b", deadHosts{} })
	b.svc.host = "host-b"
	b.svc.root = a.svc.root
	if notes := b.svc.Committed(ctx, part.Evacuate, &part.Instance{Spec: &model.Instance{Name: "a", UUID: u}, Host: "host-b"}); len(notes) != 0 {
		t.Fatalf("notes: %v", notes)
	}
	if m, _ := a.mapping(u, id); m.Host != "host-b" || m.Status != types.ShareInactive {
		t.Errorf("mapping after the evacuation's takeover: host %q status %q, want host-b, inactive", m.Host, m.Status)
	}
}
