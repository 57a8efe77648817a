package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/errkind"
)

// The two ends of every move: confirmed (the instance lives on b alone;
// a's device stays burned) and reverted (it lives on a again; b's device
// stays burned, the specification's burn rules).
const (
	confirmed = "owner=b a:[domain=false running=false files=false lvsecrets=false claimed=false burned=true] b:[domain=true running=true files=true lvsecrets=true claimed=true burned=true] s1=b s2=b"
	reverted  = "owner=a a:[domain=true running=true files=true lvsecrets=true claimed=true burned=true] b:[domain=false running=false files=false lvsecrets=false claimed=false burned=true] s1=a s2=a"
	untouched = "owner=a a:[domain=true running=true files=true lvsecrets=true claimed=true burned=true] b:[domain=false running=false files=false lvsecrets=false claimed=false burned=false] s1=a s2=a"
	inVerify  = "owner=b a:[domain=true running=false files=true lvsecrets=false claimed=true burned=true] b:[domain=true running=true files=true lvsecrets=true claimed=true burned=true] s1=b+kept s2=b+kept"
)

func TestMigrateConfirmAndRevert(t *testing.T) {
	ctx := context.Background()
	for _, end := range []string{"confirm", "revert"} {
		t.Run(end, func(t *testing.T) {
			w := newWorld(t)
			m := w.migrator()
			rec, err := m.Migrate(ctx, "vm", "b")
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != Verify || rec.Step != "started" || w.state() != inVerify {
				t.Fatalf("after migrate: %s/%s, %s; want verify, %s", rec.State, rec.Step, w.state(), inVerify)
			}
			if len(rec.Disks) != 3 || rec.Bytes == 0 {
				t.Fatalf("disks sent: %+v (%d bytes); want the two disks and the template", rec.Disks, rec.Bytes)
			}
			want := confirmed
			if end == "confirm" {
				_, err = m.Confirm(ctx, "vm")
			} else {
				_, err = m.Revert(ctx, "vm")
				want = reverted
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := w.state(); got != want {
				t.Fatalf("after %s:\n got %s\nwant %s", end, got, want)
			}
			if _, err := m.Status(ctx, "vm"); !errors.Is(err, ErrNoMove) {
				t.Fatalf("status after %s: %v, want ErrNoMove", end, err)
			}
		})
	}
}

// finish ends a move that stopped, from a fresh Migrator (a restarted
// hostctl): "retry" resumes it (when it is migrating) and confirms it,
// "revert" reverts it. It returns the state both hosts are left in.
func finish(t *testing.T, w *world, end string) string {
	t.Helper()
	ctx := context.Background()
	m := w.migrator()
	rec, err := m.Status(ctx, "vm")
	if errors.Is(err, ErrNoMove) {
		return w.state() // nothing moved
	}
	if err != nil {
		t.Fatal(err)
	}
	switch end {
	case "retry":
		switch rec.State {
		case Migrating:
			if _, err := m.Migrate(ctx, "vm", "b"); err != nil {
				t.Fatalf("retry: %v", err)
			}
			fallthrough
		case Verify, Confirming:
			if _, err := m.Confirm(ctx, "vm"); err != nil {
				t.Fatalf("confirm: %v", err)
			}
		case Reverting:
			if _, err := m.Revert(ctx, "vm"); err != nil {
				t.Fatalf("revert: %v", err)
			}
		}
	case "revert":
		if rec.State == Confirming {
			if _, err := m.Confirm(ctx, "vm"); err != nil {
				t.Fatalf("confirm: %v", err)
			}
			break
		}
		if _, err := m.Revert(ctx, "vm"); err != nil {
			t.Fatalf("revert: %v", err)
		}
	}
	if _, err := m.Status(ctx, "vm"); !errors.Is(err, ErrNoMove) {
		t.Fatalf("the move's record stays after %s: %v", end, err)
	}
	return w.state()
}

// crashCase is one cell of the crash matrix: a step (or a call) of a
// side at which the procedure stops, and the state it then shows.
type crashCase struct {
	side, at string
	// set makes the procedure stop there.
	set func(w *world, m *Migrator)
	// run is the request that stops ("migrate", "confirm", "revert").
	run string
}

// TestCrashAtEveryStep is the crash matrix of the unit tier: the source
// stopping after each step's record is written (as a SIGKILL there
// would: test/migrate kills the real processes at the same points), and
// each call of either side failing (the destination killed while it
// answers: the source sees an error) — for a move, its confirm and its
// revert. Each stop leaves a named state; from a fresh Migrator a retry
// and confirm ends in the confirmed state, a revert in the reverted one
// (a confirm or revert that stopped is completed by the same request).
func TestCrashAtEveryStep(t *testing.T) {
	var cases []crashCase
	hookAt := func(step string) func(*world, *Migrator) {
		return func(_ *world, m *Migrator) {
			fired := false
			m.hook = func(s string) error {
				if s == step && !fired {
					fired = true
					return fmt.Errorf("killed after step %s", step)
				}
				return nil
			}
		}
	}
	failAt := func(call string, n int) func(*world, *Migrator) {
		return func(w *world, _ *Migrator) { w.fail[call] = n }
	}
	for _, s := range MigrateSteps {
		cases = append(cases, crashCase{"source", s, hookAt(s), "migrate"})
	}
	for _, c := range []string{"stop"} {
		cases = append(cases, crashCase{"source", c, failAt(c, 1), "migrate"})
	}
	for _, c := range []string{"preflight", "receive-disk", "receive-secret", "take-over", "start"} {
		cases = append(cases, crashCase{"dest", c, failAt(c, 1), "migrate"})
	}
	cases = append(cases, crashCase{"dest", "receive-disk#2", failAt("receive-disk", 2), "migrate"},
		crashCase{"dest", "receive-secret#2", failAt("receive-secret", 2), "migrate"})
	for _, s := range ConfirmSteps {
		cases = append(cases, crashCase{"source", s, hookAt(s), "confirm"})
	}
	for _, c := range []string{"source-cleanup", "forget-secret"} {
		cases = append(cases, crashCase{"source", c, failAt(c, 1), "confirm"})
	}
	for _, s := range RevertSteps {
		cases = append(cases, crashCase{"source", s, hookAt(s), "revert"})
	}
	for _, c := range []string{"secret-back", "take-back", "restart"} {
		cases = append(cases, crashCase{"source", c, failAt(c, 1), "revert"})
	}
	cases = append(cases, crashCase{"dest", "dest-cleanup", failAt("dest-cleanup", 1), "revert"})

	var matrix []string
	for _, c := range cases {
		for _, end := range []string{"retry", "revert"} {
			name := c.run + "/" + c.side + "/" + c.at + "/" + end
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				w := newWorld(t)
				m := w.migrator()
				if c.run != "migrate" {
					if _, err := m.Migrate(ctx, "vm", "b"); err != nil {
						t.Fatal(err)
					}
				}
				c.set(w, m)
				var err error
				switch c.run {
				case "migrate":
					_, err = m.Migrate(ctx, "vm", "b")
				case "confirm":
					_, err = m.Confirm(ctx, "vm")
				case "revert":
					_, err = m.Revert(ctx, "vm")
				}
				if err == nil {
					t.Fatalf("%s did not stop at %s", c.run, c.at)
				}
				shown := "none"
				if rec, serr := m.Status(ctx, "vm"); serr == nil {
					shown = rec.State + "@" + rec.Step
					if !strings.Contains(err.Error(), rec.State) {
						t.Errorf("the error does not name the state %s: %v", rec.State, err)
					}
				}
				got := finish(t, w, end)
				want := confirmed
				switch {
				case shown == "none": // refused before anything moved
					want = untouched
				case c.run == "revert" || end == "revert" && !strings.HasPrefix(shown, Confirming):
					want = reverted
				case c.run == "confirm" && end == "revert" && !strings.HasPrefix(shown, Confirming):
					want = reverted
				}
				if strings.HasPrefix(shown, Reverting) {
					want = reverted
				}
				if want == reverted && !w.burned["b"] {
					want = untouched // b never started it: no device of b's was burned
				}
				if got != want {
					t.Fatalf("stopped in %s, then %s:\n got %s\nwant %s", shown, end, got, want)
				}
				matrix = append(matrix, fmt.Sprintf("%-8s %-7s %-22s %-30s %-6s -> %s", c.run, c.side, c.at, shown, end, endName(got)))
			})
		}
	}
	t.Logf("crash matrix (request, side, step, state shown, then, final):\n%s", strings.Join(matrix, "\n"))
}

func endName(state string) string {
	switch state {
	case confirmed:
		return "confirmed on b"
	case reverted:
		return "back on a"
	case untouched:
		return "back on a (b never started it)"
	}
	return state
}

// TestMoveBadInput: each bad request is refused with its kind, and
// changes nothing.
func TestMoveBadInput(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	m := w.migrator()
	for _, c := range []struct {
		host string
		kind errkind.Kind
		want string
	}{
		{"", errkind.Invalid, "host: required"},
		{"a", errkind.Invalid, "is this host"},
		{"nosuch", errkind.Invalid, "no such host"},
		{"down", errkind.Unavailable, "heartbeat is stale"},
	} {
		_, err := m.Migrate(ctx, "vm", c.host)
		if err == nil || errkind.Of(err) != c.kind || !strings.Contains(err.Error(), c.want) {
			t.Errorf("migrate to %q: %v (kind %v), want %v naming %q", c.host, err, errkind.Of(err), c.kind, c.want)
		}
	}
	for _, op := range []func(context.Context, string) (Record, error){m.Confirm, m.Revert, m.Status} {
		if _, err := op(ctx, "vm"); !errors.Is(err, ErrNoMove) || errkind.Of(err) != errkind.NotFound {
			t.Errorf("confirm/revert/status without a move: %v, want ErrNoMove (not found)", err)
		}
	}
	if w.state() != untouched {
		t.Fatalf("bad requests changed something: %s", w.state())
	}

	// A move stopped part-way: confirm refused, a move elsewhere refused.
	w.fail["take-over"] = 1
	if _, err := m.Migrate(ctx, "vm", "b"); err == nil {
		t.Fatal("injected failure did not stop the move")
	}
	if _, err := m.Confirm(ctx, "vm"); !errors.Is(err, ErrState) {
		t.Errorf("confirm of a move that is migrating: %v, want ErrState", err)
	}
	if _, err := m.Migrate(ctx, "vm", "c"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "moving to b already") {
		t.Errorf("a second move elsewhere: %v, want ErrState naming b", err)
	}
	if _, err := m.Migrate(ctx, "vm", "b"); err != nil {
		t.Fatal(err)
	}
	// In verify: a second move refused.
	if _, err := m.Migrate(ctx, "vm", "b"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "verify") {
		t.Errorf("a second move in verify: %v, want ErrState naming verify", err)
	}
	// Another host is not the one to confirm.
	other := w.migrator()
	other.Host = "b"
	if _, err := other.Confirm(ctx, "vm"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "source host a") {
		t.Errorf("confirm on the destination: %v, want ErrState naming a", err)
	}
	if _, err := m.Confirm(ctx, "vm"); err != nil {
		t.Fatal(err)
	}
	if got := w.state(); got != confirmed {
		t.Fatalf("got %s", got)
	}
}

// TestOneMoveAtATime: a move held in this process refuses a second.
func TestOneMoveAtATime(t *testing.T) {
	w := newWorld(t)
	m := w.migrator()
	release, err := m.hold("vm", uuid)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := m.Migrate(context.Background(), "vm", "b"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "is running") {
		t.Fatalf("a second move while one runs: %v", err)
	}
}

// peekDest is b, asking the Migrator for the move's status once it has
// read the first disk (the CLI's progress reads the same).
type peekDest struct {
	*fakeDest
	m    *Migrator
	seen []int64
}

func (p *peekDest) ReceiveDisk(ctx context.Context, rec Record, f DiskFile, body io.Reader) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	st, err := p.m.Status(ctx, "vm")
	if err != nil {
		return err
	}
	p.seen = append(p.seen, st.Bytes)
	return p.fakeDest.ReceiveDisk(ctx, rec, f, bytes.NewReader(b))
}

type peekHosts struct{ d *peekDest }

func (h peekHosts) Destination(context.Context, string) (Destination, error) { return h.d, nil }

// TestCopyProgress: while the disks are sent, Status counts the bytes
// sent so far.
func TestCopyProgress(t *testing.T) {
	w := newWorld(t)
	m := w.migrator()
	pd := &peekDest{fakeDest: &fakeDest{w}, m: m}
	m.Hosts = peekHosts{pd}
	rec, err := m.Migrate(context.Background(), "vm", "b")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for i, f := range rec.Disks {
		sum += f.Size
		if pd.seen[i] != sum {
			t.Errorf("status after disk %d: %d bytes, want %d", i, pd.seen[i], sum)
		}
	}
	if rec.Bytes != sum {
		t.Errorf("bytes %d, want %d", rec.Bytes, sum)
	}
}
