package keyrotation_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestRotateClassWide (issue 20 item 7): `keys rotate disk-passphrases`
// without an instance rotates every instance, the first time too (fresh
// instances are at generation 1 and no class status is ever written),
// and also an instance with a policy of its own, to one above the
// highest generation of any of them.
func TestRotateClassWide(t *testing.T) {
	for name, st := range stores.Both(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.2.0"})
			later := time.Now().Add(time.Hour) // made after tracking began: generation 1
			disk := &fakeRotator{subjects: []keyrotation.Subject{
				{Class: keyrotation.Disk, InstanceUUID: "u-a", InstanceName: "a", Created: later},
				{Class: keyrotation.Disk, InstanceUUID: "u-b", InstanceName: "b", Created: later},
				{Class: keyrotation.Disk, InstanceUUID: "u-c", InstanceName: "c", Created: later},
			}}
			e.Register(keyrotation.Disk, disk)
			class := keyrotation.Subject{Class: keyrotation.Disk}

			// The first request, before any run has recorded a status.
			rot, err := e.Rotate(ctx, class)
			if err != nil {
				t.Fatal(err)
			}
			if rot.KeyGeneration != 2 || rot.KeyRotationPolicy != keyrotation.KeyGeneration || rot.Subjects != 3 {
				t.Fatalf("first class-wide rotate: %+v, want KeyGeneration 2 of 3 subjects", rot)
			}
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			want := []string{"disk-passphrases/u-a@2", "disk-passphrases/u-b@2", "disk-passphrases/u-c@2"}
			if c := disk.took(); !slices.Equal(c, want) {
				t.Fatalf("rotations %v, want %v", c, want)
			}

			// b at 4 by its own policy, c Disabled on its own: the next
			// class-wide request targets 5 and rotates all three.
			b, c := disk.subjects[1], disk.subjects[2]
			if _, err := e.SetPolicy(ctx, b, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 4}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.SetPolicy(ctx, c, keyrotation.Policy{KeyRotationPolicy: keyrotation.Disabled}); err != nil {
				t.Fatal(err)
			}
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if c := disk.took(); !slices.Equal(c, []string{"disk-passphrases/u-b@4"}) {
				t.Fatalf("rotations %v, want b to 4", c)
			}
			if rot, err = e.Rotate(ctx, class); err != nil || rot.KeyGeneration != 5 || rot.Subjects != 3 {
				t.Fatalf("second class-wide rotate: %+v %v, want 5 of 3 subjects", rot, err)
			}
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			want = []string{"disk-passphrases/u-a@5", "disk-passphrases/u-b@5", "disk-passphrases/u-c@5"}
			if c := disk.took(); !slices.Equal(c, want) {
				t.Fatalf("rotations %v, want %v", c, want)
			}
			reports, err := e.Reports(ctx, keyrotation.Disk)
			if err != nil || len(reports) != 3 {
				t.Fatalf("reports %+v %v", reports, err)
			}
			for _, r := range reports {
				if r.Status.KeyGeneration != 5 || !r.Complete {
					t.Errorf("%s after the rotation: %+v", r.Subject, r)
				}
			}

			// One instance: one above its own generation, that instance only.
			if rot, err = e.Rotate(ctx, disk.subjects[0]); err != nil || rot.KeyGeneration != 6 || rot.Subjects != 1 {
				t.Fatalf("rotate a: %+v %v", rot, err)
			}
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if c := disk.took(); !slices.Equal(c, []string{"disk-passphrases/u-a@6"}) {
				t.Fatalf("rotations %v, want a to 6", c)
			}

			// b is running: its rotation to 7 waits; a second request
			// goes above that target (8); once b stops, one run takes it
			// to 7 and then 8.
			disk.mu.Lock()
			disk.pending = map[string]string{"disk-passphrases/u-b": "instance running"}
			disk.mu.Unlock()
			for _, want := range []int64{7, 8} {
				if rot, err = e.Rotate(ctx, class); err != nil || rot.KeyGeneration != want {
					t.Fatalf("rotate: %+v %v, want %d", rot, err, want)
				}
				if err := e.Run(ctx); err != nil {
					t.Fatal(err)
				}
			}
			disk.took()
			disk.mu.Lock()
			disk.pending = nil
			disk.mu.Unlock()
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if c := disk.took(); !slices.Equal(c, []string{"disk-passphrases/u-b@7", "disk-passphrases/u-b@8"}) {
				t.Fatalf("rotations after b stopped %v, want b to 7 then 8", c)
			}
		})
	}
}

// TestRotateNothing (issue 20 item 11): a rotation request with no keys
// to rotate says so (Subjects 0) and changes nothing.
func TestRotateNothing(t *testing.T) {
	st := stores.Bolt(t)
	ctx := t.Context()
	e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.2.0"})
	disk := &fakeRotator{}
	e.Register(keyrotation.Disk, disk)
	for _, s := range []keyrotation.Subject{
		{Class: keyrotation.Disk},
		{Class: keyrotation.Disk, InstanceUUID: "u-plain", InstanceName: "plain"}, // no encrypted disk: not a subject
	} {
		rot, err := e.Rotate(ctx, s)
		if err != nil || rot.Subjects != 0 || rot.KeyRotationPolicy != keyrotation.Disabled {
			t.Errorf("rotate %s: %+v %v, want nothing to rotate", s, rot, err)
		}
		if _, err := st.Record(ctx, "keyrotation/h1/policy/"+s.String()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("rotate %s with nothing to rotate stored a policy: %v", s, err)
		}
	}
	if _, err := e.Rotate(ctx, keyrotation.Subject{Class: keyrotation.Token}); !errors.Is(err, keyrotation.ErrUnavailable) {
		t.Errorf("rotate a class without a procedure: %v", err)
	}
}

// TestPolicySwitchAfterRotation (issue 20 item 8): after a rotation to
// generation 2, Disabled and WithVersionUpgrade (which ignore the
// generation) are accepted with keyGeneration 0; the wanted generation
// is kept, so KeyGeneration still cannot go below it.
func TestPolicySwitchAfterRotation(t *testing.T) {
	st := stores.Bolt(t)
	ctx := t.Context()
	e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.2.0"})
	e.Register(keyrotation.KEK, &fakeRotator{})
	kek := keyrotation.Subject{Class: keyrotation.KEK}
	if _, err := e.Rotate(ctx, kek); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Rotate(ctx, kek); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p       keyrotation.Policy
		wantErr error
		wantGen int64
	}{
		{keyrotation.Policy{KeyRotationPolicy: keyrotation.Disabled}, nil, 2},
		{keyrotation.Policy{KeyRotationPolicy: keyrotation.WithVersionUpgrade}, nil, 2},
		{keyrotation.Policy{}, nil, 2},
		{keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 1}, keyrotation.ErrDecrease, 2},
		{keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 2}, nil, 2},
		{keyrotation.Policy{KeyRotationPolicy: keyrotation.WithVersionUpgrade, KeyGeneration: 1}, nil, 2},
		{keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 3}, nil, 3},
	} {
		_, err := e.SetPolicy(ctx, kek, c.p)
		if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
			t.Errorf("set %+v: %v, want %v", c.p, err, c.wantErr)
		}
		p, err := e.Policy(ctx, kek)
		if err != nil || p.KeyGeneration != c.wantGen {
			t.Errorf("after %+v: stored %+v %v, want wanted generation %d", c.p, p, err, c.wantGen)
		}
	}
	for _, c := range []struct {
		prev, next keyrotation.Policy
		ok         bool
	}{
		{keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 2}, keyrotation.Policy{KeyRotationPolicy: keyrotation.Disabled}, true},
		{keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 2}, keyrotation.Policy{KeyRotationPolicy: keyrotation.WithVersionUpgrade}, true},
		{keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 2}, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 1}, false},
		{keyrotation.Policy{KeyRotationPolicy: keyrotation.Disabled, KeyGeneration: 2}, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 1}, false},
	} {
		if err := keyrotation.CheckUpdate(keyrotation.KEK, c.prev, c.next); (err == nil) != c.ok {
			t.Errorf("CheckUpdate(%+v, %+v) = %v, want ok %v", c.prev, c.next, err, c.ok)
		}
	}
}

// TestReportsEveryClass (issue 20 item 11): every class is reported with
// its policy, "no keys" where it has no subject.
func TestReportsEveryClass(t *testing.T) {
	st := stores.Bolt(t)
	ctx := t.Context()
	e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.2.0"})
	e.Register(keyrotation.KEK, &fakeRotator{})
	e.Register(keyrotation.Disk, &fakeRotator{})
	if _, err := e.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.Disk}, keyrotation.Policy{KeyRotationPolicy: keyrotation.WithVersionUpgrade}); err != nil {
		t.Fatal(err)
	}
	rs, err := e.Reports(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, string(r.Class)+" "+string(r.Policy.KeyRotationPolicy)+" "+r.NoKeys)
	}
	want := []string{
		"key-encryption-key Disabled ",
		"token-signing-key Disabled " + keyrotation.NoKeysNotConfigured,
		"proxy-secret Disabled " + keyrotation.NoKeysNotConfigured,
		"disk-passphrases WithVersionUpgrade " + keyrotation.NoKeysNoInstance,
		"cephx Disabled " + keyrotation.NoKeysNotConfigured,
	}
	if !slices.Equal(got, want) {
		t.Errorf("reports:\n%q\nwant\n%q", got, want)
	}
	if rs, err := e.Reports(ctx, keyrotation.Disk); err != nil || len(rs) != 1 || rs[0].NoKeys == "" || rs[0].InstanceUUID != "" {
		t.Errorf("disk reports: %+v %v", rs, err)
	}
}

// TestForgetInstance (issue 20 item 10): an instance's per-instance
// records go with it, on its own host or, force-deleted, another's;
// nothing else is touched.
func TestForgetInstance(t *testing.T) {
	for name, st := range stores.Both(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			later := time.Now().Add(time.Hour)
			var engines []*keyrotation.Engine
			for _, host := range []string{"h1", "h2"} {
				e := keyrotation.New(st, keyrotation.Options{Host: host, Version: "v1.2.0"})
				e.Register(keyrotation.Disk, &fakeRotator{subjects: []keyrotation.Subject{
					{Class: keyrotation.Disk, InstanceUUID: "u-" + host, InstanceName: "x", Created: later},
					{Class: keyrotation.Disk, InstanceUUID: "u-keep-" + host, InstanceName: "y", Created: later},
				}})
				for _, uuid := range []string{"u-" + host, "u-keep-" + host} {
					s := keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: uuid, InstanceName: "x"}
					if _, err := e.SetPolicy(ctx, s, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 2}); err != nil {
						t.Fatal(err)
					}
				}
				if err := e.Run(ctx); err != nil {
					t.Fatal(err)
				}
				engines = append(engines, e)
			}
			count := func(host, uuid string) int {
				n := 0
				for _, kind := range []string{"policy", "status"} {
					if _, err := st.Record(ctx, "keyrotation/"+host+"/"+kind+"/disk-passphrases/"+uuid); err == nil {
						n++
					}
				}
				return n
			}
			if count("h1", "u-h1") != 2 || count("h2", "u-h2") != 2 {
				t.Fatal("the records to forget are not there")
			}
			// h1 deletes its own instance, then force-deletes h2's.
			if err := engines[0].ForgetInstance(ctx, "", "u-h1"); err != nil {
				t.Fatal(err)
			}
			if err := engines[0].ForgetInstance(ctx, "h2", "u-h2"); err != nil {
				t.Fatal(err)
			}
			if n := count("h1", "u-h1") + count("h2", "u-h2"); n != 0 {
				t.Errorf("%d records of the deleted instances left", n)
			}
			if count("h1", "u-keep-h1") != 2 || count("h2", "u-keep-h2") != 2 {
				t.Error("records of other instances deleted")
			}
			if err := engines[0].ForgetInstance(ctx, "", "u-h1"); err != nil {
				t.Errorf("forgetting again: %v", err)
			}
		})
	}
}

// checkingRotator is a fakeRotator that says which instances exist.
type checkingRotator struct {
	*fakeRotator
	exists map[string]bool
}

func (c checkingRotator) InstanceExists(_ context.Context, uuid string) (bool, error) {
	return c.exists[uuid], nil
}

// TestSweepDeletedInstances (issue 20 item 10): the records of an
// instance deleted while they could not be deleted with it (or before
// they were) go at the next run; those of an instance that still exists
// (with no encrypted disk now, or on another host) stay.
func TestSweepDeletedInstances(t *testing.T) {
	st := stores.Bolt(t)
	ctx := t.Context()
	e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.2.0"})
	later := time.Now().Add(time.Hour)
	r := checkingRotator{&fakeRotator{}, map[string]bool{"u-live": true, "u-plain": true}}
	for _, uuid := range []string{"u-live", "u-gone", "u-plain"} {
		r.subjects = append(r.subjects, keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: uuid, InstanceName: uuid, Created: later})
	}
	e.Register(keyrotation.Disk, r)
	for _, s := range r.subjects {
		if _, err := e.SetPolicy(ctx, s, keyrotation.Policy{KeyRotationPolicy: keyrotation.Disabled}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// u-gone is deleted, u-plain loses its encrypted disks: neither is a
	// subject now.
	r.subjects = r.subjects[:1]
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		uuid string
		want bool
	}{{"u-live", true}, {"u-gone", false}, {"u-plain", true}} {
		for _, kind := range []string{"policy", "status"} {
			_, err := st.Record(ctx, "keyrotation/h1/"+kind+"/disk-passphrases/"+c.uuid)
			if got := err == nil; got != c.want {
				t.Errorf("%s record of %s: present %v, want %v (%v)", kind, c.uuid, got, c.want, err)
			}
		}
	}
}
