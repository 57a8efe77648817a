package ops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"log/slog"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// needFrame is the core as instance sees it: this host's instance,
// refused by the parts when refuse is set; a hypervisor or none; its
// domain running or shut off.
type needFrame struct {
	Frame      // only OpInstance, Capabilities and CurrentDomain are called
	hv         bool
	running    bool
	refuse     error
	domainRead bool
	what       string
}

func (f *needFrame) OpInstance(_ context.Context, what string, _ part.Op, name string) (store.Instance, *model.Instance, error) {
	f.what = what
	if f.refuse != nil {
		return store.Instance{}, nil, f.refuse
	}
	return store.Instance{Name: name, UUID: "u1"}, &model.Instance{Name: name, UUID: "u1"}, nil
}
func (f *needFrame) Capabilities() (bool, bool) { return f.hv, true }
func (f *needFrame) CurrentDomain(_ context.Context, _, uuid string) (*controller.Domain, error) {
	f.domainRead = true
	if uuid != "u1" {
		return nil, fmt.Errorf("domain of uuid %q asked for", uuid)
	}
	state := "shutoff"
	if f.running {
		state = "running"
	}
	return &controller.Domain{UUID: uuid, Running: f.running, State: virt.State(state)}, nil
}

// TestInstanceNeeds: an operation finds its instance as the parts allow
// it, then as it needs it: one needing a hypervisor is refused on a host
// without one (ErrNoHypervisor, after the ownership and the parts'
// check), one needing it stopped is refused while its domain runs
// (ErrState, saying to stop it) and allowed on a host without a
// hypervisor; errors name the operation.
func TestInstanceNeeds(t *testing.T) {
	refused := fmt.Errorf("shelve vm1: %w: it is shelved", controller.ErrState)
	for _, tc := range []struct {
		name       string
		f          needFrame
		what       string
		n          need
		wantIs     error
		wantSays   string
		domainRead bool
	}{
		{name: "hypervisor, on a host with one", f: needFrame{hv: true}, n: withHypervisor},
		{name: "hypervisor, on a host without", f: needFrame{}, n: withHypervisor, wantIs: controller.ErrNoHypervisor, wantSays: "rescue vm1"},
		{name: "hypervisor, refused by a part", f: needFrame{refuse: refused}, n: withHypervisor, wantIs: controller.ErrState, wantSays: "it is shelved"},
		{name: "stopped, shut off", f: needFrame{hv: true}, n: stopped, domainRead: true},
		{name: "stopped, running", f: needFrame{hv: true, running: true}, n: stopped, wantIs: controller.ErrState, wantSays: "rescue vm1: ", domainRead: true},
		{name: "stopped, no hypervisor", f: needFrame{}, n: stopped},
		{name: "stopped, refused by a part", f: needFrame{hv: true, running: true, refuse: refused}, n: stopped, wantIs: controller.ErrState, wantSays: "it is shelved"},
		{name: "named", f: needFrame{}, what: "attach disk to", n: withHypervisor, wantIs: controller.ErrNoHypervisor, wantSays: "attach disk to vm1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			rec, in, err := instance(context.Background(), &f, tc.what, part.Rescue, "vm1", tc.n)
			switch {
			case tc.wantIs == nil && (err != nil || rec.UUID != "u1" || in == nil || in.Name != "vm1"):
				t.Fatalf("instance = %+v, %+v, %v; want vm1", rec, in, err)
			case tc.wantIs != nil && (!errors.Is(err, tc.wantIs) || !strings.Contains(err.Error(), tc.wantSays)):
				t.Fatalf("instance: %v; want %v saying %q", err, tc.wantIs, tc.wantSays)
			}
			if tc.n == stopped && tc.f.running && tc.f.refuse == nil && !strings.Contains(err.Error(), "stop it first") {
				t.Errorf("a running instance: %v; want it told to stop first", err)
			}
			if f.domainRead != tc.domainRead {
				t.Errorf("domain read: %t, want %t", f.domainRead, tc.domainRead)
			}
			if want := tc.what; want == "" && f.what != string(part.Rescue) || want != "" && f.what != want {
				t.Errorf("OpInstance named the operation %q", f.what)
			}
		})
	}
}

// TestSetAside: a file set aside is out of the way of its replacement;
// the undo puts it back over whatever replaced it.
func TestSetAside(t *testing.T) {
	p := filepath.Join(t.TempDir(), "disk-vda.qcow2")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := revert.New(slog.New(slog.DiscardHandler), "test")
	aside, err := setAside(r, p)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(aside); err != nil || string(b) != "old" || fileExists(p) {
		t.Fatalf("set aside: %q %v, original still there: %t", b, err, fileExists(p))
	}
	if err := os.WriteFile(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = errors.New("a later step failed")
	r.Fail(&err)
	if b, err := os.ReadFile(p); err != nil || string(b) != "old" || fileExists(aside) {
		t.Errorf("after the undo: %q %v, aside still there: %t", b, err, fileExists(aside))
	}
}
