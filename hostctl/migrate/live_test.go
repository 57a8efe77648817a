package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/errkind"
)

// Live moves over the fakes of fakes_test.go: libvirt's migration is a
// fake that either completes (the domain runs on b, gone from a) or
// leaves the domain running on a — and, for a crash of hostctl while
// libvirt migrates, completes but never answers.

// liveDone is both hosts after a live move: the instance lives on b
// alone, running all along (never stopped); a's device stays burned.
const liveDone = confirmed

// fakeLiveSource is host a, able to migrate live.
type fakeLiveSource struct{ fakeSource }

func (s *fakeLiveSource) CheckLive(ctx context.Context, name string) (Instance, *Live, error) {
	in, err := s.Check(ctx, name)
	if err != nil {
		return in, nil, err
	}
	if !in.Running {
		return in, nil, fmt.Errorf("%w: vm is not running: a stopped instance moves cold", ErrState)
	}
	return in, &Live{Disks: []LiveDisk{{Name: "disk.root", Format: "qcow2", VirtualSize: 1 << 20, Secret: "s1"},
		{Name: "disk.eph0", Format: "qcow2", VirtualSize: 1 << 20, Backing: "instances/_base/template", BackingFormat: "qcow2", Secret: "s2"}}}, nil
}

func (w *world) domState(h string) string {
	switch {
	case w.running[h]:
		return "running"
	case w.domain[h]:
		return "shut off"
	}
	return ""
}

func (s *fakeLiveSource) DomainState(context.Context, Record) (string, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.w.domState("a"), s.w.call("source-state")
}

func (s *fakeLiveSource) MigrateDomain(_ context.Context, rec Record) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("migrate-domain"); err != nil {
		return err // libvirt failed: the domain runs on a still
	}
	if !s.w.files["b"] || !s.w.lvSecrets["b"] || s.w.wrap["s1"] != "b" || rec.Live.Target.URI != "qemu+unix:///b" {
		return fmt.Errorf("libvirt: the destination lacks its disks, secrets or URI (%+v)", rec.Live.Target)
	}
	s.w.running["a"], s.w.domain["a"], s.w.domain["b"], s.w.running["b"] = false, false, true, true
	return s.w.call("migrate-domain-unanswered") // libvirt completed; hostctl never heard
}

// fakeLiveDest is host b, able to receive a live migration.
type fakeLiveDest struct{ fakeDest }

func (d *fakeLiveDest) PrepareLive(context.Context, Record) (LiveTarget, error) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if err := d.w.call("prepare-live"); err != nil {
		return LiveTarget{}, err
	}
	if d.w.wrap["s1"] != "b" || d.w.wrap["s2"] != "b" || len(d.w.received) != 1 {
		return LiveTarget{}, fmt.Errorf("prepare on b without the secrets or the template (%d files)", len(d.w.received))
	}
	d.w.files["b"], d.w.lvSecrets["b"] = true, true
	return LiveTarget{URI: "qemu+unix:///b", DataDir: "/b"}, nil
}

func (d *fakeLiveDest) DomainState(context.Context, Record) (string, error) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	return d.w.domState("b"), d.w.call("dest-state")
}

func (d *fakeLiveDest) FinishLive(context.Context, Record) error {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if err := d.w.call("finish-live"); err != nil {
		return err
	}
	if !d.w.running["b"] {
		return fmt.Errorf("finish on b while the domain does not run there")
	}
	d.w.owner, d.w.claimed["b"], d.w.burned["b"] = "b", true, true
	return nil
}

type fakeLiveHosts struct{ w *world }

func (h fakeLiveHosts) Destination(ctx context.Context, host string) (Destination, error) {
	if host == "b" {
		return &fakeLiveDest{fakeDest(h)}, nil
	}
	return fakeHosts(h).Destination(ctx, host)
}

func (w *world) liveMigrator() *Migrator {
	m := w.migrator()
	m.Source, m.Hosts = &fakeLiveSource{fakeSource{w}}, fakeLiveHosts{w}
	return m
}

func TestMigrateLive(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	m := w.liveMigrator()
	rec, err := m.MigrateLive(ctx, "vm", "b")
	if err != nil {
		t.Fatal(err)
	}
	if got := w.state(); got != liveDone {
		t.Fatalf("after a live move:\n got %s\nwant %s", got, liveDone)
	}
	if w.calls["stop"] != 0 || w.calls["receive-disk"] != 1 {
		t.Fatalf("a live move stopped the guest (%d) or sent disks itself (%d files; want the template only)", w.calls["stop"], w.calls["receive-disk"])
	}
	if _, err := m.Status(ctx, "vm"); !errors.Is(err, ErrNoMove) {
		t.Fatalf("the record stays after a live move: %v", err)
	}
	if rec.Live == nil || rec.Live.Target.URI == "" {
		t.Fatalf("record: %+v", rec)
	}
}

// TestLiveCrashAtEveryStep: hostctl dies (the hook stops the procedure
// as a SIGKILL would, the step's record written) after each step of a
// live move, or while libvirt migrates (libvirt completes and hostctl
// never hears, or libvirt fails); a fresh Migrator then retries — which
// looks where the domain runs — or reverts. The final state of each case
// is the crash matrix.
func TestLiveCrashAtEveryStep(t *testing.T) {
	ctx := context.Background()
	type crash struct {
		at   string
		arm  func(*world, *Migrator)
		end  string
		want string
	}
	var cases []crash
	for i, s := range LiveSteps {
		arm := func(_ *world, m *Migrator) {
			m.hook = func(got string) error {
				if got == s {
					return fmt.Errorf("crash after %s", s)
				}
				return nil
			}
		}
		cases = append(cases, crash{"after " + s, arm, "retry", liveDone})
		revertable := i < slices.Index(LiveSteps, "live-switched")
		want := untouched
		if !revertable {
			want = "refused"
		}
		cases = append(cases, crash{"after " + s, arm, "revert", want})
	}
	for _, f := range []string{"migrate-domain", "migrate-domain-unanswered", "prepare-live", "finish-live", "source-cleanup", "forget-secret", "receive-secret", "receive-disk", "dest-state", "source-state"} {
		arm := func(w *world, _ *Migrator) { w.fail[f] = 1 }
		cases = append(cases, crash{"failing " + f, arm, "retry", liveDone})
	}
	var matrix []string
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.at, " ", "_")+"/"+c.end, func(t *testing.T) {
			w := newWorld(t)
			m := w.liveMigrator()
			c.arm(w, m)
			if _, err := m.MigrateLive(ctx, "vm", "b"); err == nil {
				t.Fatal("the armed fault did not stop the move")
			}
			rec, err := w.liveMigrator().Status(ctx, "vm")
			if err != nil {
				t.Fatalf("no record after the crash: %v", err)
			}
			stopped := rec.State + "/" + rec.Step
			m = w.liveMigrator()
			got := ""
			switch c.end {
			case "retry":
				_, err = m.MigrateLive(ctx, "vm", "b")
			case "revert":
				_, err = m.Revert(ctx, "vm")
				if c.want == "refused" {
					if !errors.Is(err, ErrState) || errkind.Of(err) != errkind.Conflict {
						t.Fatalf("revert after the switchover: %v, want a conflict", err)
					}
					got = "refused"
					// The same command completes it.
					if _, err = m.MigrateLive(ctx, "vm", "b"); err == nil && w.state() != liveDone {
						t.Fatalf("retry after the refused revert: %s", w.state())
					}
				}
			}
			if err != nil {
				t.Fatalf("%s: %v", c.end, err)
			}
			if got == "" {
				got = w.state()
			}
			if got != c.want {
				t.Fatalf("%s then %s:\n got %s\nwant %s", c.at, c.end, got, c.want)
			}
			if _, err := m.Status(ctx, "vm"); c.want != "refused" && !errors.Is(err, ErrNoMove) {
				t.Fatalf("record after %s: %v", c.end, err)
			}
			name := map[string]string{liveDone: "on b (completed)", untouched: "on a (reverted)", "refused": "revert refused; retry completes on b"}[c.want]
			matrix = append(matrix, fmt.Sprintf("%-40s stopped %-35s %-6s -> %s", c.at, stopped, c.end, name))
		})
	}
	t.Logf("live migration crash matrix (source side drives; destination calls fail or crash as the source sees them):\n%s", strings.Join(matrix, "\n"))
}

func TestMigrateLiveBadInput(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		dest string
		prep func(*world)
		kind errkind.Kind
		want string
	}{
		{"", nil, errkind.Invalid, "host: required"},
		{"a", nil, errkind.Invalid, "is this host"},
		{"nowhere", nil, errkind.Invalid, "no such host"},
		{"down", nil, errkind.Unavailable, "stale"},
		{"b", func(w *world) { w.running["a"] = false }, errkind.Conflict, "moves cold"},
		// The destination's own error, whose kind is passed on (the
		// fake's injected failure has none: the zero Kind).
		{"b", func(w *world) { w.fail["preflight"] = 1 }, 0, "refused by the destination"},
	} {
		w := newWorld(t)
		if c.prep != nil {
			c.prep(w)
		}
		before := w.state()
		_, err := w.liveMigrator().MigrateLive(ctx, "vm", c.dest)
		if err == nil || !strings.Contains(err.Error(), c.want) || errkind.Of(err) != c.kind {
			t.Errorf("to %q: %v (kind %v), want %v %q", c.dest, err, errkind.Of(err), c.kind, c.want)
		}
		if w.state() != before {
			t.Errorf("to %q: something changed: %s", c.dest, w.state())
		}
		if _, err := w.liveMigrator().Status(ctx, "vm"); !errors.Is(err, ErrNoMove) {
			t.Errorf("to %q: a record stays: %v", c.dest, err)
		}
	}
	// A cold move's resume is not a live one's, and the other way round.
	w := newWorld(t)
	m := w.liveMigrator()
	m.hook = func(s string) error { return fmt.Errorf("crash after %s", s) }
	_, _ = m.MigrateLive(ctx, "vm", "b")
	if _, err := w.liveMigrator().Migrate(ctx, "vm", "b"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "--live") {
		t.Errorf("cold migrate of a live move: %v", err)
	}
}
