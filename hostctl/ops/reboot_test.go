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
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// The faults part is the Faults the reboot finds among the core's parts.
var _ Faults = (*faults.Part)(nil)

// fakeCore is the core as the reboot sees it (Frame, Power, InPlace,
// Faults): it records the calls, in order, and fails the one named in
// fail.
type fakeCore struct {
	Frame   // only LockInstance, Observe, Get, Capabilities, OpInstance and CurrentDomain are called
	running bool
	inPlace bool   // the hypervisor reboots a domain in place
	fail    string // the call that fails
	refuse  error  // OpInstance's refusal (the parts' Check)
	calls   []string
	locked  bool
}

var errFake = errors.New("injected")

func (f *fakeCore) call(name string) error {
	f.calls = append(f.calls, name)
	if f.fail == name {
		return fmt.Errorf("%s: %w", name, errFake)
	}
	return nil
}

func (f *fakeCore) LockInstance(string) func() {
	f.locked = true
	return func() { f.locked = false }
}
func (f *fakeCore) Observe(string, time.Time, *error) {}
func (f *fakeCore) Get(context.Context, string) (*controller.Instance, error) {
	return &controller.Instance{}, f.call("get")
}
func (f *fakeCore) Capabilities() (bool, bool)                      { return true, true }
func (f *fakeCore) PreStart(context.Context, part.Op, string) error { return f.call("prestart") }

// OpInstance and CurrentDomain are the reboot's target: the instance
// checked by the parts (recorded as "target"), its domain.
func (f *fakeCore) OpInstance(_ context.Context, _ string, op part.Op, _ string) (store.Instance, *model.Instance, error) {
	if !f.locked {
		return store.Instance{}, nil, errors.New("the target found without the instance's lock")
	}
	if err := f.call("target " + string(op)); err != nil {
		return store.Instance{}, nil, err
	}
	if f.refuse != nil {
		return store.Instance{}, nil, f.refuse
	}
	return store.Instance{Name: "vm1", UUID: "u1"}, &model.Instance{Name: "vm1", UUID: "u1"}, nil
}
func (f *fakeCore) CurrentDomain(context.Context, string, string) (*controller.Domain, error) {
	return &controller.Domain{UUID: "u1", Running: f.running}, nil
}
func (f *fakeCore) PowerOff(context.Context, store.Instance) error { return f.call("poweroff") }
func (f *fakeCore) Resume(context.Context, store.Instance) error   { return f.call("startdomain") }
func (f *fakeCore) Reboot(context.Context, string) error           { return f.call("rebootdomain") }
func (f *fakeCore) Start(context.Context, string) (*controller.Instance, error) {
	return &controller.Instance{}, f.call("start")
}
func (f *fakeCore) Stop(context.Context, string, time.Duration) (*controller.Instance, error) {
	return &controller.Instance{}, f.call("stop")
}
func (f *fakeCore) ClearFault(_ context.Context, uuid, _ string) error {
	if !f.locked {
		return errors.New("fault cleared without the instance's lock")
	}
	return f.call("clear " + uuid)
}

// TestReboot: a hard reboot powers a running domain off, starts it as a
// start does and only then clears the fault, under the instance's lock;
// a soft reboot is libvirt's in place, or a stop and a start, of a
// running instance only; a refusal or a failing step is answered and
// nothing after it happens.
func TestReboot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hard    bool
		core    fakeCore
		calls   string
		wantErr string
		state   bool // the error is ErrState
	}{
		{name: "hard, running", hard: true, core: fakeCore{running: true},
			calls: "prestart, target reboot-hard, poweroff, startdomain, clear u1, get"},
		{name: "hard, shut off", hard: true,
			calls: "prestart, target reboot-hard, startdomain, clear u1, get"},
		{name: "hard, the start fails: the fault stays", hard: true, core: fakeCore{running: true, fail: "startdomain"},
			calls: "prestart, target reboot-hard, poweroff, startdomain", wantErr: "reboot vm1: startdomain: injected"},
		{name: "hard, the power-off fails", hard: true, core: fakeCore{running: true, fail: "poweroff"},
			calls: "prestart, target reboot-hard, poweroff", wantErr: "reboot vm1: poweroff: injected"},
		{name: "hard, the fault not cleared", hard: true, core: fakeCore{fail: "clear u1"},
			calls: "prestart, target reboot-hard, startdomain, clear u1", wantErr: "reboot vm1: clear u1: injected"},
		{name: "hard, the parts before the start fail", hard: true, core: fakeCore{fail: "prestart"},
			calls: "prestart", wantErr: "reboot vm1: prestart: injected"},
		{name: "soft, in place", core: fakeCore{running: true, inPlace: true},
			calls: "target reboot-soft, rebootdomain, get"},
		{name: "soft, no reboot in place: stop and start", core: fakeCore{running: true},
			calls: "target reboot-soft, stop, start"},
		{name: "soft, shut off", core: fakeCore{inPlace: true},
			calls: "target reboot-soft", wantErr: "a soft reboot needs a running instance", state: true},
		{name: "soft, refused by a part (in ERROR)", core: fakeCore{running: true, inPlace: true, refuse: fmt.Errorf("%w: a hard reboot is needed", controller.ErrState)},
			calls: "target reboot-soft", wantErr: "a hard reboot is needed", state: true},
		{name: "soft, the reboot in place fails", core: fakeCore{running: true, inPlace: true, fail: "rebootdomain"},
			calls: "target reboot-soft, rebootdomain", wantErr: "reboot vm1: rebootdomain: injected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.core
			o := &rebooter{base: base{frame: &f, log: slog.New(slog.DiscardHandler)}, power: &f, faults: &f}
			if f.inPlace {
				o.inPlace = &f
			}
			_, err := o.Reboot(context.Background(), "vm1", tc.hard)
			if got := strings.Join(f.calls, ", "); got != tc.calls {
				t.Errorf("calls: %s\nwant:  %s", got, tc.calls)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			if tc.state != errors.Is(err, controller.ErrState) {
				t.Errorf("error %v: ErrState %t, want %t", err, !tc.state, tc.state)
			}
			if f.locked {
				t.Error("the instance's lock is still held")
			}
		})
	}
}

// TestFaultsOf: the reboot finds the part that keeps the faults among the
// core's parts, and clears nothing without one.
func TestFaultsOf(t *testing.T) {
	if _, ok := faultsOf(nil).(noFaults); !ok {
		t.Error("without parts: want noFaults")
	}
	f := &fakeFaultsPart{}
	if got := faultsOf([]part.Part{nil, f}); got != Faults(f) {
		t.Errorf("faultsOf = %T, want the faults part", got)
	}
}

type fakeFaultsPart struct{ part.Part }

func (*fakeFaultsPart) ClearFault(context.Context, string, string) error { return nil }
