package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/internal/store"
)

// The states part is the stateKeeper an adopt finds among the core's
// parts.
var _ stateKeeper = (*vmstate.Part)(nil)

// fakeOwners is the core as the adopt and the forced delete see it
// (Frame, Owners, RecordParts): one record, the calls in order, the call
// named in fail failing, and what the store holds after a lost
// compare-and-swap (after: the record as another writer left it, gone:
// deleted).
type fakeOwners struct {
	Frame  // only LockInstance, Observe and Get are called
	host   string
	rec    store.Instance
	alive  bool
	refuse error // the parts' Check
	fail   string
	after  *store.Instance
	gone   bool
	state  string
	calls  []string
	locked bool
}

func (f *fakeOwners) call(name string) error {
	if !f.locked {
		return fmt.Errorf("%s without the instance's lock", name)
	}
	f.calls = append(f.calls, name)
	if f.fail == name {
		return fmt.Errorf("%s: %w", name, errFake)
	}
	return nil
}

func (f *fakeOwners) LockInstance(string) func() {
	f.locked = true
	return func() { f.locked = false }
}
func (f *fakeOwners) Observe(string, time.Time, *error) {}
func (f *fakeOwners) Get(context.Context, string) (*controller.Instance, error) {
	return &controller.Instance{}, f.call("get")
}
func (f *fakeOwners) Host() string { return f.host }
func (f *fakeOwners) Instance(_ context.Context, name string) (store.Instance, error) {
	switch {
	case f.gone:
		return store.Instance{}, fmt.Errorf("instance %s: %w", name, store.ErrNotFound)
	case f.after != nil:
		return *f.after, nil
	}
	return f.rec, f.call("read")
}
func (f *fakeOwners) Owns(rec store.Instance) bool {
	return rec.Host == "" || f.host == "" || rec.Host == f.host
}
func (f *fakeOwners) OwnerDown(_ context.Context, what string, rec store.Instance) error {
	if err := f.call("ownerdown"); err != nil {
		return err
	}
	if f.alive {
		return fmt.Errorf("%s: %w: %s lives on %s", what, controller.ErrOwnerAlive, rec.Name, rec.Host)
	}
	return nil
}
func (f *fakeOwners) TakeOver(_ context.Context, rec store.Instance) (store.Instance, error) {
	if err := f.call("takeover"); err != nil {
		return store.Instance{}, err
	}
	if f.after != nil || f.gone {
		return store.Instance{}, fmt.Errorf("put %s: %w", rec.Name, store.ErrConflict)
	}
	rec.Host = f.host
	return rec, nil
}
func (f *fakeOwners) Forget(context.Context, store.Instance) error { return f.call("forget") }
func (f *fakeOwners) CheckRecordParts(_ context.Context, op part.Op, _ store.Instance) error {
	if err := f.call("check " + string(op)); err != nil {
		return err
	}
	return f.refuse
}
func (f *fakeOwners) CommittedRecordParts(_ context.Context, op part.Op, rec store.Instance) []string {
	if f.call("committed "+string(op)+" on "+rec.Host) != nil {
		return nil
	}
	return []string{"a part's note"}
}
func (f *fakeOwners) EnsureDrive(context.Context, store.Instance) error { return f.call("drive") }
func (f *fakeOwners) State(context.Context, string) (string, error)     { return f.state, nil }

func newAdopter(f *fakeOwners) *adopter {
	return &adopter{base: base{frame: f, log: slog.New(slog.DiscardHandler)}, owners: f, parts: f, states: f}
}

// TestAdoptSteps: an adopt checks (not this host's yet, the owner down,
// the parts) before it writes; it takes the record over under the
// instance's lock, tells the parts, and rebuilds the config drive unless
// the instance has a state; a lost compare-and-swap names why.
func TestAdoptSteps(t *testing.T) {
	rec := store.Instance{Name: "vm1", UUID: "u1", Host: "host-a", Revision: 3}
	all := "read ownerdown check adopt takeover committed adopt on host-b"
	for _, tc := range []struct {
		name  string
		f     fakeOwners
		calls string
		isErr []error
		msg   string
	}{
		{name: "adopted", f: fakeOwners{}, calls: all + " drive get"},
		{name: "shelved: no drive", f: fakeOwners{state: "shelved"}, calls: all + " get"},
		{name: "drive fails: adopted anyway", f: fakeOwners{fail: "drive"}, calls: all + " drive get"},
		{name: "already here", f: fakeOwners{rec: store.Instance{Name: "vm1", Host: "host-b"}}, calls: "read",
			isErr: []error{controller.ErrState}, msg: "adopt vm1: instance state does not allow this: it already lives on host-b"},
		{name: "owner alive", f: fakeOwners{alive: true}, calls: "read ownerdown", isErr: []error{controller.ErrOwnerAlive}},
		{name: "refused by a part", f: fakeOwners{refuse: fmt.Errorf("adopt vm1: %w: shelved elsewhere", controller.ErrState)},
			calls: "read ownerdown check adopt", isErr: []error{controller.ErrState}, msg: "shelved elsewhere"},
		{name: "store fails", f: fakeOwners{fail: "takeover"}, calls: "read ownerdown check adopt takeover", isErr: []error{errFake}, msg: "adopt vm1: takeover: injected"},
		{name: "another host won", f: fakeOwners{after: &store.Instance{Name: "vm1", Host: "host-c"}}, calls: "read ownerdown check adopt takeover",
			isErr: []error{store.ErrConflict}, msg: "vm1 lives on host-c now: that host adopted it at the same time"},
		{name: "deleted meanwhile", f: fakeOwners{gone: true}, calls: "read ownerdown check adopt takeover",
			isErr: []error{store.ErrConflict}, msg: "the record was deleted while adopting it"},
		{name: "owner wrote it", f: fakeOwners{after: &store.Instance{Name: "vm1", Host: "host-a"}}, calls: "read ownerdown check adopt takeover",
			isErr: []error{store.ErrConflict}, msg: "the record changed while adopting it (its owner wrote it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			f.host = "host-b"
			if f.rec.Name == "" {
				f.rec = rec
			}
			after, gone := f.after, f.gone
			f.after, f.gone = nil, false
			// The record changes (or goes) only once it has been read.
			o := newAdopter(&f)
			o.owners = &lateChange{fakeOwners: &f, after: after, gone: gone}
			_, err := o.Adopt(context.Background(), "vm1")
			if got := strings.Join(f.calls, " "); got != tc.calls {
				t.Errorf("calls %q, want %q", got, tc.calls)
			}
			if f.locked {
				t.Error("the instance's lock is held after the adopt")
			}
			if tc.isErr == nil && err != nil {
				t.Fatalf("adopt: %v", err)
			}
			for _, want := range tc.isErr {
				if !errors.Is(err, want) {
					t.Errorf("adopt = %v, want it to wrap %v", err, want)
				}
			}
			if tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg)) {
				t.Errorf("adopt = %v, want it to say %q", err, tc.msg)
			}
		})
	}
}

// lateChange is fakeOwners whose record changes (after) or goes (gone)
// between the adopt's read and its compare-and-swap.
type lateChange struct {
	*fakeOwners
	after *store.Instance
	gone  bool
}

func (l *lateChange) TakeOver(ctx context.Context, rec store.Instance) (store.Instance, error) {
	l.fakeOwners.after, l.fakeOwners.gone = l.after, l.gone
	return l.fakeOwners.TakeOver(ctx, rec)
}

// TestForceDeleteSteps: a forced delete refuses this host's own instance
// and one whose owner is alive, lets the parts check, and only then
// forgets the record; it returns what stays on the dead host and the
// parts' notes.
func TestForceDeleteSteps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		f     fakeOwners
		calls string
		isErr error
		msg   string
	}{
		{name: "forgotten", f: fakeOwners{}, calls: "read ownerdown check force-delete forget committed force-delete on host-a"},
		{name: "own instance", f: fakeOwners{rec: store.Instance{Name: "vm1", Host: "host-b"}}, calls: "read",
			isErr: controller.ErrState, msg: "it lives on this host (host-b): use a plain delete"},
		{name: "no host named", f: fakeOwners{rec: store.Instance{Name: "vm1"}}, calls: "read", isErr: controller.ErrState},
		{name: "owner alive", f: fakeOwners{alive: true}, calls: "read ownerdown", isErr: controller.ErrOwnerAlive},
		{name: "refused by a part", f: fakeOwners{refuse: controller.ErrState}, calls: "read ownerdown check force-delete", isErr: controller.ErrState},
		{name: "store fails", f: fakeOwners{fail: "forget"}, calls: "read ownerdown check force-delete forget", isErr: errFake,
			msg: "delete vm1 from the store: forget: injected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			f.host = "host-b"
			if f.rec.Name == "" {
				f.rec = store.Instance{Name: "vm1", UUID: "u1", Host: "host-a"}
			}
			left, err := newAdopter(&f).ForceDeleteFromStore(context.Background(), "vm1")
			if got := strings.Join(f.calls, " "); got != tc.calls {
				t.Errorf("calls %q, want %q", got, tc.calls)
			}
			if f.locked {
				t.Error("the instance's lock is held after the forced delete")
			}
			if tc.isErr == nil {
				if err != nil {
					t.Fatalf("force delete: %v", err)
				}
				got := strings.Join(left, "\n")
				for _, want := range []string{"the domain vm1, its disks and files on host host-a", "DHCP host entries of vm1 in host host-a's libvirt network", "a part's note"} {
					if !strings.Contains(got, want) {
						t.Errorf("left %q, want it to name %q", left, want)
					}
				}
				return
			}
			if !errors.Is(err, tc.isErr) || (tc.msg != "" && !strings.Contains(err.Error(), tc.msg)) {
				t.Errorf("force delete = %v, want %v saying %q", err, tc.isErr, tc.msg)
			}
		})
	}
}
