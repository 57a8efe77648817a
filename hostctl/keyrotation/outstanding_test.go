package keyrotation_test

import (
	"errors"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestOutstanding: the counts the metrics export follow the stored
// statuses: nothing outstanding at first (every class reported, at 0), a
// failed KEK rotation counted as failed, an instance whose disks wait
// for it to stop as pending, and both cleared once the rotations finish;
// another host's statuses are not this host's.
func TestOutstanding(t *testing.T) {
	for name, st := range stores.Both(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.2.0"})
			kek, disk := &fakeRotator{}, &fakeRotator{}
			disk.subjects = []keyrotation.Subject{
				{Class: keyrotation.Disk, InstanceUUID: "u-a", InstanceName: "a", Created: time.Unix(1, 0)},
				{Class: keyrotation.Disk, InstanceUUID: "u-b", InstanceName: "b", Created: time.Unix(1, 0)},
			}
			e.Register(keyrotation.KEK, kek)
			e.Register(keyrotation.Disk, disk)
			// Another host on the same store, with a failure of its own.
			other := keyrotation.New(st, keyrotation.Options{Host: "h2", Version: "v1.2.0"})
			otherKEK := &fakeRotator{fail: errors.New("induced on h2")}
			other.Register(keyrotation.KEK, otherKEK)

			want := func(w map[keyrotation.Class]keyrotation.Outstanding) {
				t.Helper()
				got, err := e.Outstanding(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range keyrotation.Classes {
					if got[c] != w[c] {
						t.Errorf("%s: %+v, want %+v", c, got[c], w[c])
					}
				}
				if len(got) != len(keyrotation.Classes) {
					t.Errorf("classes %v, want every one of %v", got, keyrotation.Classes)
				}
			}
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			want(nil)

			kek.fail = errors.New("induced")
			disk.pending = map[string]string{"disk-passphrases/u-b": "instance b is running"}
			for _, s := range []keyrotation.Subject{{Class: keyrotation.KEK}, {Class: keyrotation.Disk}, {Class: keyrotation.Disk}} {
				if _, err := e.Rotate(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := other.Rotate(ctx, keyrotation.Subject{Class: keyrotation.KEK}); err != nil {
				t.Fatal(err)
			}
			if err := other.Run(ctx); err == nil {
				t.Fatal("h2's run with a failing rotator: no error")
			}
			if err := e.Run(ctx); err == nil {
				t.Fatal("run with a failing rotator: no error")
			}
			want(map[keyrotation.Class]keyrotation.Outstanding{
				keyrotation.KEK:  {Failed: 1},
				keyrotation.Disk: {Pending: 1},
			})

			kek.fail, disk.pending = nil, nil
			if err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
			want(nil)
		})
	}
}
