package keyrotation_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// fakeRotator records the rotations asked of it; a fake is enough here:
// the real procedures have their own tests with real keys and disks.
type fakeRotator struct {
	mu       sync.Mutex
	calls    []string // "subject@gen"
	fail     error
	pending  map[string]string // subject → pending reason (not done)
	subjects []keyrotation.Subject
}

func (f *fakeRotator) Rotate(_ context.Context, s keyrotation.Subject, gen int64, keep int, progress func(keyrotation.Progress)) (keyrotation.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s.String()+"@"+itoa(gen))
	if f.fail != nil {
		return keyrotation.Result{}, f.fail
	}
	if why := f.pending[s.String()]; why != "" {
		return keyrotation.Result{Pending: why}, nil
	}
	for i := range 3 {
		progress(keyrotation.Progress{Done: i + 1, Total: 3})
	}
	n := keep
	return keyrotation.Result{Done: true, PriorKeyCount: &n}, nil
}

func (f *fakeRotator) Subjects(context.Context) ([]keyrotation.Subject, error) {
	return f.subjects, nil
}

func (f *fakeRotator) Prune(_ context.Context, keep int) (int, error) {
	return keep, nil
}

func (f *fakeRotator) took() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestEngine(t *testing.T) {
	for name, st := range stores.Both(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.2.0"})
			kek, proxy, disk := &fakeRotator{}, &fakeRotator{}, &fakeRotator{}
			disk.subjects = []keyrotation.Subject{
				{Class: keyrotation.Disk, InstanceUUID: "u-old", InstanceName: "old", Created: time.Unix(1, 0)},
				{Class: keyrotation.Disk, InstanceUUID: "u-new", InstanceName: "new", Created: time.Now().Add(time.Hour)},
			}
			e.Register(keyrotation.KEK, kek)
			e.Register(keyrotation.Proxy, proxy)
			e.Register(keyrotation.Disk, disk)

			// Disabled by default: nothing rotates; statuses initialised
			// (an instance made before tracking began is generation 0, one
			// made after it 1).
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if c := append(kek.took(), disk.took()...); len(c) != 0 {
				t.Fatalf("rotations with policies disabled: %v", c)
			}
			status := func(s keyrotation.Subject) keyrotation.Status {
				t.Helper()
				st, err := e.Status(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			if g := status(disk.subjects[0]).KeyGeneration; g != 0 {
				t.Errorf("old instance: generation %d, want 0", g)
			}
			if s := status(disk.subjects[1]); s.KeyGeneration != 1 || s.KeyVersion != "v1.2.0" {
				t.Errorf("new instance: %+v, want generation 1 of v1.2.0", s)
			}

			// KeyGeneration 3 on the KEK: one rotation to 3, then nothing.
			if _, err := e.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.KEK}, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 3}); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := e.Run(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if c := kek.took(); !slices.Equal(c, []string{"key-encryption-key@3"}) {
				t.Fatalf("KEK rotations %v, want one to 3", c)
			}
			s := status(keyrotation.Subject{Class: keyrotation.KEK})
			if s.KeyGeneration != 3 || s.KeyVersion != "v1.2.0" || s.Target != 0 || s.Pending != "" || s.Progress != nil {
				t.Fatalf("KEK status %+v", s)
			}

			// A decrease is refused and changes nothing.
			_, err := e.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.KEK}, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 2})
			if !errors.Is(err, keyrotation.ErrDecrease) {
				t.Fatalf("decrease: %v", err)
			}
			if p, _ := e.Policy(ctx, keyrotation.Subject{Class: keyrotation.KEK}); p.KeyGeneration != 3 {
				t.Fatalf("policy after refused decrease: %+v", p)
			}

			// A failed rotation keeps its target: the next run finishes it
			// even when the policy has been disabled since.
			kek.fail = errors.New("induced")
			if _, err := e.Rotate(ctx, keyrotation.Subject{Class: keyrotation.KEK}); err != nil {
				t.Fatal(err)
			}
			if err := e.Run(ctx); err == nil {
				t.Fatal("run with a failing rotator: no error")
			}
			s = status(keyrotation.Subject{Class: keyrotation.KEK})
			if s.Target != 4 || s.Error == "" || s.KeyGeneration != 3 {
				t.Fatalf("status after failure: %+v", s)
			}
			if _, err := e.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.KEK}, keyrotation.Policy{KeyRotationPolicy: keyrotation.Disabled, KeyGeneration: 4}); err != nil {
				t.Fatal(err)
			}
			kek.fail = nil
			kek.took()
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if c := kek.took(); !slices.Equal(c, []string{"key-encryption-key@4"}) {
				t.Fatalf("resumed rotations %v", c)
			}
			if s = status(keyrotation.Subject{Class: keyrotation.KEK}); s.KeyGeneration != 4 || s.Error != "" || s.Target != 0 {
				t.Fatalf("status after resume: %+v", s)
			}

			// Per instance: the class policy applies to both, an instance's
			// own policy overrides it; a pending (running) instance is
			// asked again next run.
			disk.pending = map[string]string{"disk-passphrases/u-new": "instance running"}
			if _, err := e.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.Disk}, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 2}); err != nil {
				t.Fatal(err)
			}
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if c := disk.took(); !slices.Equal(c, []string{"disk-passphrases/u-new@2", "disk-passphrases/u-old@2"}) {
				t.Fatalf("disk rotations %v", c)
			}
			if s := status(disk.subjects[1]); s.Pending != "instance running" || s.KeyGeneration != 1 || s.Target != 2 {
				t.Fatalf("pending instance status %+v", s)
			}
			reports, err := e.Reports(ctx, keyrotation.Disk)
			if err != nil || len(reports) != 2 || reports[0].Complete || !reports[1].Complete {
				t.Fatalf("reports %+v, %v", reports, err)
			}
			disk.pending = nil
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if c := disk.took(); !slices.Equal(c, []string{"disk-passphrases/u-new@2"}) {
				t.Fatalf("disk rotations after stop %v", c)
			}

			// Overlapping class: keep-prior reaches the rotator, prune
			// updates the status.
			if _, err := e.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.Proxy}, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 1, KeepPriorKeyCount: ptr(2)}); err != nil {
				t.Fatal(err)
			}
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if s := status(keyrotation.Subject{Class: keyrotation.Proxy}); s.PriorKeyCount == nil || *s.PriorKeyCount != 2 {
				t.Fatalf("proxy status %+v", s)
			}
			if s, err := e.Prune(ctx, keyrotation.Proxy, 0); err != nil || *s.PriorKeyCount != 0 {
				t.Fatalf("prune: %+v %v", s, err)
			}
			if _, err := e.Prune(ctx, keyrotation.KEK, 0); !errors.Is(err, keyrotation.ErrInvalid) {
				t.Fatalf("prune of the KEK: %v", err)
			}
		})
	}
}

func ptr(n int) *int { return &n }

func TestWithVersionUpgrade(t *testing.T) {
	st := stores.Bolt(t)
	ctx := t.Context()
	r := &fakeRotator{}
	run := func(version string) []string {
		t.Helper()
		e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: version})
		e.Register(keyrotation.Token, r)
		if _, err := e.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.Token}, keyrotation.Policy{KeyRotationPolicy: keyrotation.WithVersionUpgrade}); err != nil {
			t.Fatal(err)
		}
		if err := e.Run(ctx); err != nil {
			t.Fatal(err)
		}
		return r.took()
	}
	e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.0.0"})
	if err := e.MarkCreated(ctx, keyrotation.Subject{Class: keyrotation.Token}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		version string
		want    []string
	}{
		{"v1.0.0", nil},
		{"devel+57aaa02", nil},
		{"v1.0.0-3-g57aaa02", []string{"token-signing-key@2"}},
		{"v1.0.0-3-g57aaa02", nil},
		{"v0.9.0", nil},
		{"v1.1.0", []string{"token-signing-key@3"}},
	} {
		if got := run(c.version); !slices.Equal(got, c.want) {
			t.Errorf("start at %s: rotations %v, want %v", c.version, got, c.want)
		}
	}
}

func TestPolicyCheck(t *testing.T) {
	for _, c := range []struct {
		class keyrotation.Class
		p     keyrotation.Policy
		ok    bool
	}{
		{keyrotation.KEK, keyrotation.Policy{}, true},
		{keyrotation.KEK, keyrotation.Policy{KeyRotationPolicy: keyrotation.WithVersionUpgrade}, true},
		{keyrotation.Proxy, keyrotation.Policy{KeyRotationPolicy: keyrotation.WithVersionUpgrade}, false},
		{keyrotation.Proxy, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 2, KeepPriorKeyCount: ptr(1)}, true},
		{keyrotation.KEK, keyrotation.Policy{KeepPriorKeyCount: ptr(1)}, false},
		{keyrotation.Disk, keyrotation.Policy{KeepPriorKeyCount: ptr(0)}, false},
		{keyrotation.Proxy, keyrotation.Policy{KeepPriorKeyCount: ptr(11)}, false},
		{keyrotation.Proxy, keyrotation.Policy{KeepPriorKeyCount: ptr(-1)}, false},
		{keyrotation.Token, keyrotation.Policy{KeyGeneration: -1}, false},
		{keyrotation.Token, keyrotation.Policy{KeyRotationPolicy: "Always"}, false},
	} {
		err := c.p.Check(c.class)
		if (err == nil) != c.ok {
			t.Errorf("%s %+v: %v", c.class, c.p, err)
		}
		if err != nil && !errors.Is(err, keyrotation.ErrInvalid) {
			t.Errorf("%s %+v: %v is not ErrInvalid", c.class, c.p, err)
		}
	}
}

func TestNewer(t *testing.T) {
	for _, c := range []struct {
		running, minted string
		want            bool
	}{
		{"v1.2.0", "v1.1.9", true},
		{"v1.2.0", "v1.2.0", false},
		{"v1.2.0-1-gabc", "v1.2.0", true},
		{"v1.2.0-dirty", "v1.2.0", false},
		{"v1.10.0", "v1.9.0", true},
		{"v1.2.0", "", true},
		{"devel+abc", "v1.0.0", false},
		{"devel", "", false},
		{"v1.2.0", "devel+abc", false},
		{"v1.2", "v1.0.0", false},
	} {
		if got := keyrotation.Newer(c.running, c.minted); got != c.want {
			t.Errorf("Newer(%q, %q) = %v", c.running, c.minted, got)
		}
	}
}

func TestParseFlag(t *testing.T) {
	c, p, err := keyrotation.ParseFlag("proxy=KeyGeneration,generation=2,keep-prior=1")
	if err != nil || c != keyrotation.Proxy || p.KeyGeneration != 2 || *p.KeepPriorKeyCount != 1 {
		t.Fatalf("%v %+v %v", c, p, err)
	}
	for _, bad := range []string{"kek", "kek=Sometimes", "kek=KeyGeneration,keep-prior=1", "nope=Disabled", "kek=KeyGeneration,generation=x", "kek=KeyGeneration,colour=2"} {
		if _, _, err := keyrotation.ParseFlag(bad); !errors.Is(err, keyrotation.ErrInvalid) {
			t.Errorf("ParseFlag(%q): %v", bad, err)
		}
	}
}
