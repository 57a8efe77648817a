//go:build linux

package altname_test

import (
	"errors"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmeta/vmeta/guest/altname"
	"github.com/vmeta/vmeta/internal/testenv"
)

// inNewNetns runs f on a thread moved into a new, empty network
// namespace (only lo, index 1), so the test changes no interface of the
// machine. The thread is discarded afterwards.
func inNewNetns(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	var skip string
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			skip = err.Error()
			return
		}
		f()
	}()
	<-done
	if skip != "" {
		testenv.Require(t, "a private network namespace", "unshare(CLONE_NEWNET): "+skip+" (needs root)")
	}
}

func TestAltNames(t *testing.T) {
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var before, after, removed altname.Link
	var dupErr error
	inNewNetns(t, func() {
		var err error
		before, err = altname.Get(1)
		check(err)
		check(altname.Add(1, "vmeta-test-lo"))
		check(altname.Add(1, `db\x2fprimary`))
		dupErr = altname.Add(1, "vmeta-test-lo")
		after, err = altname.Get(1)
		check(err)
		check(altname.Del(1, "vmeta-test-lo"))
		removed, err = altname.Get(1)
		check(err)
	})
	if errors.Is(errors.Join(errs...), altname.ErrUnsupported) {
		testenv.Require(t, "alternative interface names", "kernel older than 5.5")
	}
	for _, err := range errs {
		t.Error(err)
	}
	if before.Name != "lo" || len(before.AltNames) != 0 {
		t.Errorf("before: %+v", before)
	}
	if !slices.Equal(after.AltNames, []string{"vmeta-test-lo", `db\x2fprimary`}) {
		t.Errorf("after adding: %+v", after)
	}
	if !errors.Is(dupErr, unix.EEXIST) {
		t.Errorf("adding a name twice: %v, want EEXIST", dupErr)
	}
	if !slices.Equal(removed.AltNames, []string{`db\x2fprimary`}) {
		t.Errorf("after removing: %+v", removed)
	}
	var missing error
	inNewNetns(t, func() { _, missing = altname.Get(999) })
	if !errors.Is(missing, unix.ENODEV) {
		t.Errorf("Get(999): %v, want ENODEV", missing)
	}
}
