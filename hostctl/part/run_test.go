package part

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// fake is a part that logs its phases to log, answers do for every
// operation (refuse: Refuse for op), and fails the phases in fail.
type fake struct {
	name   string
	do     Action
	refuse Op
	fail   map[string]bool
	log    *[]string
}

func (f *fake) Name() string { return f.name }
func (f *fake) Answers() Answers {
	a := Answers{}
	for _, op := range Ops() {
		a[op] = Answer{Do: f.do, Why: "because"}
	}
	if f.refuse != "" {
		a[f.refuse] = Answer{Do: Refuse, Why: "no " + f.name}
	}
	return a
}
func (f *fake) step(phase string) error {
	*f.log = append(*f.log, f.name+" "+phase)
	if f.fail[phase] {
		return errors.New(phase + " failed")
	}
	return nil
}
func (f *fake) Check(_ context.Context, op Op, in *Instance) error {
	if op == f.refuse {
		*f.log = append(*f.log, f.name+" check")
		return Refusal(f, op, in)
	}
	return f.step("check")
}
func (f *fake) Prepare(_ context.Context, _ Op, _ *Instance, _ *revert.Reverter, c *Contribution) error {
	c.Devices = append(c.Devices, Device{Kind: f.name})
	return f.step("prepare")
}
func (f *fake) Devices(*Instance) ([]Device, error) {
	if err := f.step("devices"); err != nil {
		return nil, err
	}
	return []Device{{Kind: f.name, Detail: "d"}}, nil
}
func (f *fake) AfterStart(context.Context, *Instance) error  { return f.step("after start") }
func (f *fake) AfterStop(context.Context, *Instance) error   { return f.step("after stop") }
func (f *fake) AfterDelete(context.Context, *Instance) error { return f.step("after delete") }

// claimer is a fake that also claims.
type claimer struct{ fake }

func (c *claimer) Claim(context.Context, Op, *Instance) (func(context.Context, error), error) {
	if err := c.step("claim"); err != nil {
		return nil, err
	}
	return func(_ context.Context, err error) { *c.log = append(*c.log, c.name+" end: "+errString(err)) }, nil
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// TestSetPhases: each phase runs, in registration order, the parts that
// implement it and act on the operation (Check: those that do not
// answer Nothing); the first error stops it naming the part, a refusal
// wraps ErrState; a failed Claim ends the claims before it, newest
// first; the after-phases run every part whatever the others did.
func TestSetPhases(t *testing.T) {
	ctx := context.Background()
	in := &Instance{Spec: &model.Instance{Name: "vm"}}
	var log []string
	mk := func(name string, do Action, fail ...string) *fake {
		f := &fake{name: name, do: do, fail: map[string]bool{}, log: &log}
		for _, p := range fail {
			f.fail[p] = true
		}
		return f
	}
	cases := []struct {
		name    string
		set     func() Set
		run     func(Set) error
		wantLog []string
		wantErr string
		state   bool // the error wraps ErrState
	}{
		{
			name:    "check skips Nothing, checks Act",
			set:     func() Set { return Set{mk("a", Act), mk("b", Nothing), mk("c", Act)} },
			run:     func(s Set) error { return s.Check(ctx, Apply, in) },
			wantLog: []string{"a check", "c check"},
		},
		{
			name: "a refusal stops the check and wraps ErrState",
			set: func() Set {
				b := mk("b", Nothing)
				b.refuse = Shelve
				return Set{mk("a", Act), b, mk("c", Act)}
			},
			run:     func(s Set) error { return s.Check(ctx, Shelve, in) },
			wantLog: []string{"a check", "b check"},
			wantErr: "instance state does not allow this: shelve vm: refused by b: no b",
			state:   true,
		},
		{
			name:    "prepare stops at the first error, naming the part",
			set:     func() Set { return Set{mk("a", Act), mk("b", Act, "prepare"), mk("c", Act)} },
			run:     func(s Set) error { _, err := s.Prepare(ctx, Apply, in, nil); return err },
			wantLog: []string{"a prepare", "b prepare"},
			wantErr: "b: prepare failed",
		},
		{
			name: "claim: only Claimers that act; a failure ends the others newest first",
			set: func() Set {
				return Set{&claimer{*mk("a", Act)}, mk("b", Act), &claimer{*mk("n", Nothing)}, &claimer{*mk("c", Act)}, &claimer{*mk("d", Act, "claim")}}
			},
			run:     func(s Set) error { _, err := s.Claim(ctx, Apply, in); return err },
			wantLog: []string{"a claim", "c claim", "d claim", "c end: claim failed", "a end: claim failed"},
			wantErr: "claim failed",
		},
		{
			name: "after: the parts that act on op, each whatever the others did",
			set:  func() Set { return Set{mk("a", Act, "after stop"), mk("b", Nothing), mk("c", Act)} },
			run: func(s Set) error {
				var errs []error
				s.After(ctx, Part.AfterStop, Stop, in, func(name string, err error) { errs = append(errs, errors.New(name+": "+err.Error())) })
				return errors.Join(errs...)
			},
			wantLog: []string{"a after stop", "c after stop"},
			wantErr: "a: after stop failed",
		},
		{
			name: "after with no op: every part",
			set:  func() Set { return Set{mk("a", Act), mk("b", Nothing)} },
			run: func(s Set) error {
				s.After(ctx, Part.AfterDelete, "", in, func(string, error) {})
				return nil
			},
			wantLog: []string{"a after delete", "b after delete"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log = nil
			err := tc.run(tc.set())
			if got := errString(err); (tc.wantErr == "" && err != nil) || (tc.wantErr != "" && got != tc.wantErr) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			if errors.Is(err, ErrState) != tc.state {
				t.Errorf("errors.Is(%v, ErrState) = %v, want %v", err, !tc.state, tc.state)
			}
			if !slices.Equal(log, tc.wantLog) {
				t.Errorf("phases:\n got %q\nwant %q", log, tc.wantLog)
			}
		})
	}
}

// TestSetDevices: a part whose Devices fails is listed as unknown, the
// others as they say; the first failure is returned naming the part.
func TestSetDevices(t *testing.T) {
	var log []string
	s := Set{&fake{name: "a", do: Act, log: &log}, &fake{name: "b", do: Act, fail: map[string]bool{"devices": true}, log: &log}}
	devs, err := s.Devices(&Instance{})
	var got []string
	for _, d := range devs {
		got = append(got, d.Kind+": "+d.Detail)
	}
	if want := "a: d; b: unknown: devices failed"; strings.Join(got, "; ") != want || errString(err) != "b: devices failed" {
		t.Fatalf("Devices = %q, %v; want %q, b: devices failed", got, err, want)
	}
	if p, ok := First[Part](s, ""); !ok || p.Name() != "a" {
		t.Fatalf("First = %v, %v", p, ok)
	}
	if _, ok := First[Claimer](s, ""); ok {
		t.Fatal("First[Claimer] of a set without one found one")
	}
}

// publisher is a fake Publisher whose Drifted says why.
type publisher struct {
	fake
	why string
}

func (p *publisher) Publish(context.Context, *Instance, *metadata.Tree, int64, *revert.Reverter) (func(), error) {
	return nil, p.step("publish")
}
func (p *publisher) Drifted(context.Context, *Instance, int64) string { return p.why }
func (p *publisher) Transport(context.Context, *Instance, bool, int64) Transport {
	return Transport{Name: p.name}
}

// TestSetDrifted: the first Publisher that drifted names itself and why;
// parts that are no Publisher are not asked.
func TestSetDrifted(t *testing.T) {
	var log []string
	s := Set{&fake{name: "a", do: Act, log: &log}, &publisher{fake{name: "b", log: &log}, ""}, &publisher{fake{name: "c", log: &log}, "stale"}, &publisher{fake{name: "d", log: &log}, "also"}}
	if name, why := s.Drifted(context.Background(), &Instance{}, 3); name != "c" || why != "stale" {
		t.Fatalf("Drifted = %q, %q; want c, stale", name, why)
	}
	if name, why := s[:2].Drifted(context.Background(), &Instance{}, 3); name != "" || why != "" {
		t.Fatalf("Drifted with none drifted = %q, %q", name, why)
	}
}

// phased is a fake with every optional phase of an operation's revert.
type phased struct{ fake }

func (p *phased) BeforeStart(context.Context, *Instance, *revert.Reverter) error {
	return p.step("before start")
}
func (p *phased) Remove(context.Context, Op, *Instance, *revert.Reverter) error {
	return p.step("remove")
}
func (p *phased) Defined(context.Context, Op, *Instance, *revert.Reverter) error {
	return p.step("defined")
}
func (p *phased) Complete(context.Context, Op, *Instance, *revert.Reverter) error {
	return p.step("complete")
}
func (p *phased) Committed(context.Context, Op, *Instance) []string {
	_ = p.step("committed")
	return []string{p.name}
}
func (p *phased) PreStart(context.Context, Op, *Instance) error { return p.step("prestart") }
func (p *phased) StartFailed(context.Context, *Instance, error) error {
	return p.step("start failed")
}

// TestSetOptionalPhases: BeforeStart and StartFailed run every Starter
// and StartFailer whatever the operation (and whatever it answers; the
// start's error joined by theirs); the other optional phases run
// the parts that implement them and act on the operation, in order, the
// first error stopping them.
func TestSetOptionalPhases(t *testing.T) {
	ctx := context.Background()
	in := &Instance{Spec: &model.Instance{Name: "vm"}}
	var log []string
	mk := func(name string, do Action, fail ...string) *phased {
		p := &phased{fake{name: name, do: do, fail: map[string]bool{}, log: &log}}
		for _, f := range fail {
			p.fail[f] = true
		}
		return p
	}
	s := Set{mk("a", Act), &fake{name: "plain", do: Act, log: &log}, mk("n", Nothing), mk("b", Act, "remove", "prestart", "start failed")}
	steps := []struct {
		run  func() error
		want []string
		err  string
	}{
		{func() error { return s.BeforeStart(ctx, in, nil) }, []string{"a before start", "n before start", "b before start"}, ""},
		{func() error { return s.StartFailed(ctx, in, errors.New("boom")) }, []string{"a start failed", "n start failed", "b start failed"}, "boom\nstart failed failed"},
		{func() error { return s.Remove(ctx, Delete, in, nil) }, []string{"a remove", "b remove"}, "b: remove failed"},
		{func() error { return s.Defined(ctx, Apply, in, nil) }, []string{"a defined", "b defined"}, ""},
		{func() error { return s.Complete(ctx, Apply, in, nil) }, []string{"a complete", "b complete"}, ""},
		{func() error { return s.PreStart(ctx, Start, in) }, []string{"a prestart", "b prestart"}, "prestart failed"},
		{func() error {
			if notes := s.Committed(ctx, Apply, in); !slices.Equal(notes, []string{"a", "b"}) {
				return errors.New("notes " + strings.Join(notes, ","))
			}
			return nil
		}, []string{"a committed", "b committed"}, ""},
	}
	for i, st := range steps {
		log = nil
		err := st.run()
		if (st.err == "" && err != nil) || (st.err != "" && errString(err) != st.err) {
			t.Errorf("step %d: err = %v, want %q", i, err, st.err)
		}
		if !slices.Equal(log, st.want) {
			t.Errorf("step %d: phases %q, want %q", i, log, st.want)
		}
	}
}

// medium is a fake MediaChanger.
type medium struct {
	fake
	got *[]string
}

func (m *medium) ChangeMedium(_ context.Context, _ *revert.Reverter, name, staged string, rev int64) (func(), []string, error) {
	*m.got = append(*m.got, fmt.Sprintf("%s %s %s %d", m.name, name, staged, rev))
	return func() { *m.got = append(*m.got, m.name+" commit") }, []string{m.name + " warns"}, nil
}

// TestSetChangeMedium: the first MediaChanger gets the drive, whatever
// it answers; without one, nothing happens and commit is still there.
func TestSetChangeMedium(t *testing.T) {
	ctx := context.Background()
	var log, got []string
	commit, warn, err := Set{&fake{name: "plain", do: Act, log: &log}}.ChangeMedium(ctx, nil, "vm", "d.staged", 3)
	if err != nil || warn != nil || commit == nil {
		t.Fatalf("no media changer: commit nil %v, %v %v", commit == nil, warn, err)
	}
	commit()
	s := Set{&fake{name: "plain", do: Act, log: &log}, &medium{fake{name: "m1", do: Nothing, log: &log}, &got}, &medium{fake{name: "m2", do: Act, log: &log}, &got}}
	commit, warn, err = s.ChangeMedium(ctx, nil, "vm", "d.staged", 3)
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if want := []string{"m1 vm d.staged 3", "m1 commit"}; !slices.Equal(got, want) || !slices.Equal(warn, []string{"m1 warns"}) {
		t.Errorf("calls %q, warnings %q; want %q, [m1 warns]", got, warn, want)
	}
}
