package ops

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// liveFake is the core as LiveDevices uses it: the instance's lock, its
// domain (running or not), the hot-plug (recorded, failing when told),
// the running XML read while a detached device leaves (recorded once the
// device changed), the publish (failing when told).
type liveFake struct {
	Frame   // only LockInstance, Observe, OpInstance, Capabilities and CurrentDomain are used
	running bool
	calls   []string
	fail    string // "attach", "detach" or "finish"
	locked  int
}

func (f *liveFake) LockInstance(string) func()        { f.locked++; return func() { f.locked-- } }
func (f *liveFake) Observe(string, time.Time, *error) {}
func (f *liveFake) Capabilities() (bool, bool)        { return true, true }
func (f *liveFake) OpInstance(_ context.Context, _ string, _ part.Op, name string) (store.Instance, *model.Instance, error) {
	if f.locked != 1 {
		return store.Instance{}, nil, errors.New("device target read without the instance's lock")
	}
	return store.Instance{Name: name}, &model.Instance{Name: name}, nil
}
func (f *liveFake) CurrentDomain(context.Context, string, string) (*controller.Domain, error) {
	return &controller.Domain{Running: f.running}, nil
}
func (f *liveFake) DeviceHost(*model.Instance) (virt.Host, virt.Options) {
	return virt.Host{}, virt.Options{}
}
func (f *liveFake) RunningXML(context.Context, string) ([]byte, error) {
	if len(f.calls) > 0 {
		f.calls = append(f.calls, "xml")
	}
	return []byte("<domain/>"), nil
}

// DetachTimeout: a device still there after the detach is reported at
// the first look.
func (f *liveFake) DetachTimeout() time.Duration { return -time.Nanosecond }

// FinishDeviceChange publishes as the core's does: the store's Put is
// the commit point (r.Success).
func (f *liveFake) FinishDeviceChange(_ context.Context, r *revert.Reverter, _, _ *model.Instance, _ int64) (*controller.Instance, error) {
	f.calls = append(f.calls, "finish")
	if f.fail == "finish" {
		return nil, errors.New("publish failed")
	}
	r.Success()
	return &controller.Instance{Warnings: []string{"published"}}, nil
}

type liveHotPlug struct{ f *liveFake }

func (h liveHotPlug) do(op string) error {
	h.f.calls = append(h.f.calls, op)
	if h.f.fail == op {
		return errors.New(op + " failed")
	}
	return nil
}
func (h liveHotPlug) AttachDevice(context.Context, string, []byte, virt.Affect) error {
	return h.do("attach")
}
func (h liveHotPlug) DetachDevice(context.Context, string, []byte, virt.Affect) error {
	return h.do("detach")
}
func (h liveHotPlug) UpdateDevice(context.Context, string, []byte, virt.Affect) error {
	return h.do("update")
}

// TestChangeLive: a part's device is hot-plugged into a running instance
// under its lock and the change published; a shut-off domain and a plan
// that refuses change nothing; a failed publish unplugs the device
// again; a detach whose device stays in the running XML warns.
func TestChangeLive(t *testing.T) {
	ctx := context.Background()
	dev := func(detach, present bool) func(in *model.Instance, _ []byte) (part.LiveDevice, error) {
		return func(in *model.Instance, _ []byte) (part.LiveDevice, error) {
			d := part.LiveDevice{Spec: in, XML: []byte("<filesystem/>"), Detach: detach, What: "share data"}
			if detach {
				d.Present = func([]byte) bool { return present }
			}
			return d, nil
		}
	}
	for _, tc := range []struct {
		name      string
		running   bool
		fail      string
		plan      func(*model.Instance, []byte) (part.LiveDevice, error)
		wantErr   string
		wantCalls []string
		wantWarn  []string // each the start of a warning
	}{
		{name: "attach", running: true, plan: dev(false, false), wantCalls: []string{"attach", "finish"}, wantWarn: []string{"published"}},
		{name: "shut off", plan: dev(false, false), wantErr: "needs a running domain"},
		{name: "plan refuses", running: true, plan: func(*model.Instance, []byte) (part.LiveDevice, error) {
			return part.LiveDevice{}, errors.New("no shared memory")
		}, wantErr: "no shared memory"},
		{name: "attach fails", running: true, fail: "attach", plan: dev(false, false), wantErr: "share data: attach failed", wantCalls: []string{"attach"}},
		{name: "publish fails", running: true, fail: "finish", plan: dev(false, false), wantErr: "publish failed", wantCalls: []string{"attach", "finish", "detach"}},
		{name: "detach", running: true, plan: dev(true, false), wantCalls: []string{"detach", "xml", "finish"}, wantWarn: []string{"published"}},
		{name: "detach pending", running: true, plan: dev(true, true), wantCalls: []string{"detach", "xml", "finish"}, wantWarn: []string{"share data: the guest has not released it", "published"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &liveFake{running: tc.running, fail: tc.fail}
			l := &LiveDevices{base: base{frame: f, log: slog.New(slog.DiscardHandler)}, devices: f, hotplug: liveHotPlug{f}}
			warn, err := l.ChangeLive(ctx, "attach share to", "vm1", tc.plan)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ChangeLive: %v, want an error saying %q", err, tc.wantErr)
				}
				if tc.name == "shut off" && !errors.Is(err, controller.ErrState) {
					t.Errorf("a shut-off domain: %v, want ErrState", err)
				}
			} else if err != nil || !slices.EqualFunc(warn, tc.wantWarn, strings.HasPrefix) {
				t.Fatalf("ChangeLive: %v, %v; want %v", warn, err, tc.wantWarn)
			}
			if !slices.Equal(f.calls, tc.wantCalls) {
				t.Errorf("calls %v, want %v", f.calls, tc.wantCalls)
			}
			if f.locked != 0 {
				t.Errorf("the instance's lock is held %d times after the change", f.locked)
			}
		})
	}
}
