package controller_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/hosts/hoststest"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

// deletePart records the instances its AfterDelete is told of; it acts
// on force-delete when forced is set, and does nothing for it otherwise.
type deletePart struct {
	name   string
	forced bool
	mu     sync.Mutex
	got    []string // "<host>/<uuid>"
}

func (p *deletePart) Name() string { return p.name }

func (p *deletePart) Answers() part.Answers {
	a := part.Answers{}
	for _, op := range part.Ops() {
		a[op] = part.Answer{Do: part.Nothing}
	}
	a[part.Delete] = part.Answer{Do: part.Act, Why: "records go with the instance"}
	if p.forced {
		a[part.ForceDelete] = part.Answer{Do: part.Act, Why: "records go with the instance"}
	}
	return a
}

func (*deletePart) Check(context.Context, part.Op, *part.Instance) error { return nil }
func (*deletePart) Prepare(context.Context, part.Op, *part.Instance, *revert.Reverter, *part.Contribution) error {
	return nil
}
func (*deletePart) Devices(*part.Instance) ([]part.Device, error)    { return nil, nil }
func (*deletePart) AfterStart(context.Context, *part.Instance) error { return nil }
func (*deletePart) AfterStop(context.Context, *part.Instance) error  { return nil }

func (p *deletePart) AfterDelete(_ context.Context, in *part.Instance) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, in.Host+"/"+in.Spec.UUID)
	return nil
}

func (p *deletePart) calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

// TestForceDeleteTellsParts: a force delete from another host runs
// AfterDelete of the parts that act on force-delete (and only theirs),
// naming the instance's owner as its host, as a plain delete names its
// own host (the key rotation records of hostctl/diskrotate's Forget part
// are the owner's).
func TestForceDeleteTellsParts(t *testing.T) {
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	live := &hoststest.Liveness{}
	forced, plain := &deletePart{name: "forced", forced: true}, &deletePart{name: "plain"}
	cs := map[string]*controller.Controller{}
	for _, h := range []string{"host-a", "host-b"} {
		cs[h] = controller.New(st, controller.Options{DataDir: t.TempDir(), Host: h, Hosts: live,
			Logger: slog.New(slog.DiscardHandler), Parts: []part.Part{forced, plain}})
	}
	inst, err := cs["host-a"].Apply(ctx, []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	live.Set("host-a", true)
	if _, err := cs["host-b"].ForceDeleteFromStore(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	live.Set("host-a", false)
	if got, want := forced.calls(), []string{"host-a/" + inst.Spec.UUID}; len(got) != 1 || got[0] != want[0] {
		t.Fatalf("AfterDelete of the part acting on force-delete: %v, want %v", got, want)
	}
	if got := plain.calls(); len(got) != 0 {
		t.Fatalf("AfterDelete of a part doing nothing on force-delete: %v", got)
	}

	inst, err = cs["host-a"].Apply(ctx, []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs["host-a"].Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	want := "host-a/" + inst.Spec.UUID
	if got := plain.calls(); len(got) != 1 || got[0] != want {
		t.Fatalf("AfterDelete after a plain delete: %v, want [%s]", got, want)
	}
}
