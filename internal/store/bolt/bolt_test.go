package bolt

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storetest"
)

func openTemp(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "data", "vmeta.db"), opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}

func TestOpenCreatesPrivateFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "vmeta")
	path := filepath.Join(dir, "store.db")
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	// Only the owner may read the state (umask can only take bits away).
	for _, p := range []string{dir, path} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s: mode %v, want no group or other access", p, perm)
		}
	}
}

func TestReopenPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vmeta.db")
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	in := store.Instance{Name: "vm", UUID: "u-1", Addresses: []string{"10.0.0.1"}, Spec: []byte(`{}`)}
	if _, _, err := s.Put(t.Context(), in, store.Document{Tree: []byte("t1")}, 0); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if _, _, err := s.Put(t.Context(), in, store.Document{Tree: []byte("t2")}, 1); err != nil {
		t.Fatalf("Put: %v", err)
	}
	sec := store.WrappedSecret{KeyID: "k", Generation: 2, Nonce: []byte{0, 1}, Ciphertext: []byte{2, 3}}
	if err := s.PutSecret(t.Context(), "u-1", "disk", sec); err != nil {
		t.Fatalf("PutSecret: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s, err = Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	got, err := s.Instance(t.Context(), "vm")
	if err != nil || got.Revision != 2 || got.UUID != "u-1" {
		t.Fatalf("Instance after reopen = %+v, %v", got, err)
	}
	doc, err := s.Document(t.Context(), "u-1")
	if err != nil || doc.Version != 2 || string(doc.Tree) != "t2" {
		t.Fatalf("Document after reopen = %+v, %v", doc, err)
	}
	if uuid, err := s.LookupAddress(t.Context(), "10.0.0.1"); err != nil || uuid != "u-1" {
		t.Fatalf("LookupAddress after reopen = %q, %v", uuid, err)
	}
	if gotSec, err := s.GetSecret(t.Context(), "u-1", "disk"); err != nil || gotSec.Generation != 2 {
		t.Fatalf("GetSecret after reopen = %+v, %v", gotSec, err)
	}
	// Counting continues where it was.
	if gotInst, gotDoc, err := s.Put(t.Context(), in, store.Document{Tree: []byte("t3")}, 2); err != nil || gotInst.Revision != 3 || gotDoc.Version != 3 {
		t.Fatalf("Put after reopen = %d/%d, %v; want 3/3", gotInst.Revision, gotDoc.Version, err)
	}
}

// bbolt locks the file with flock(2), which also excludes a second open file
// description in the same process, so this stands in for a second process.
func TestSecondOpenIsLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vmeta.db")
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()

	start := time.Now()
	s2, err := Open(path, WithLockTimeout(100*time.Millisecond))
	if err == nil {
		s2.Close()
		t.Fatal("second Open of an open store succeeded")
	}
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "locked by another process") {
		t.Fatalf("second Open error %q should name the file and say it is locked", msg)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("second Open waited %s", waited)
	}
	t.Logf("second Open: %v", err)

	// Once the first is closed the file opens again.
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s3, err := Open(path, WithLockTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s3.Close()
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "not-a-db")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("x", 8192)), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(notDB); err == nil {
		s.Close()
		t.Fatal("Open of a file that is not a bbolt database succeeded")
	} else if !strings.Contains(err.Error(), notDB) {
		t.Fatalf("error %q should name the file", err)
	}
	// The parent is a file, so the directory cannot be made.
	if s, err := Open(filepath.Join(notDB, "vmeta.db")); err == nil {
		s.Close()
		t.Fatal("Open below a regular file succeeded")
	}
}

func TestDocumentVersionReader(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{`{"instance_uuid":"u","version":7,"tree":"AAAA"}`, 7, false},
		{`{"tree":"AAAA","addresses":["10.0.0.1"],"version":9}`, 9, false},
		{`{"instance_uuid":"u"}`, 0, true},
		{`[1]`, 0, true},
		{``, 0, true},
		{`{"version":"x"}`, 0, true},
	} {
		got, err := documentVersion([]byte(tc.in))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("documentVersion(%s) = %d, %v; want %d, error %t", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func BenchmarkPut(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	storetest.BenchmarkPut(b, s)
}

func BenchmarkDocument(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	storetest.BenchmarkDocument(b, s)
}

func BenchmarkLookupAddress(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	storetest.BenchmarkLookupAddress(b, s)
}

// A watcher that does not read loses changes once its buffer is full, and
// then gets a Resync; Put never waits for it.
func TestWatchOverflowResync(t *testing.T) {
	const watchBuffer = 16
	s := openTemp(t, withWatchBuffer(watchBuffer))
	defer s.Close()
	ch, err := s.Watch(t.Context())
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	in := store.Instance{Name: "vm", UUID: "u-1", Spec: []byte(`{}`)}
	const puts = 16 + 10
	for range puts {
		if _, _, err := s.Put(t.Context(), in, store.Document{}, -1); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	before := storetest.WaitResync(t, ch)
	if len(before) != watchBuffer {
		t.Fatalf("%d changes before the resync, want the %d that fit", len(before), watchBuffer)
	}
	for i, c := range before {
		storetest.WantChange(t, c, "u-1", int64(i+1))
	}
	// Live again.
	if _, _, err := s.Put(t.Context(), in, store.Document{}, -1); err != nil {
		t.Fatalf("Put: %v", err)
	}
	storetest.WantChange(t, storetest.Next(t, ch), "u-1", puts+1)
}

// Close ends every watcher's channel; Watch and Ping on a closed store fail.
func TestCloseEndsWatch(t *testing.T) {
	s := openTemp(t)
	ch, err := s.Watch(t.Context())
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("a change after Close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch channel still open 10s after Close")
	}
	if _, err := s.Watch(t.Context()); err == nil {
		t.Fatal("Watch on a closed store succeeded")
	}
	if err := s.Ping(t.Context()); err == nil {
		t.Fatal("Ping on a closed store succeeded")
	}
}

// The password survives a reopen, and so does its absence.
func TestPasswordPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vmeta.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []store.Instance{{Name: "a", UUID: "u-a", Spec: []byte(`{}`)}, {Name: "b", UUID: "u-b", Spec: []byte(`{}`)}} {
		if _, _, err := s.Put(t.Context(), in, store.Document{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetPassword(t.Context(), "u-a", []byte{}); err != nil {
		t.Fatalf("SetPassword (empty): %v", err)
	}
	s.Close()
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if pw, err := s.Password(t.Context(), "u-a"); err != nil || pw == nil || len(pw) != 0 {
		t.Fatalf("empty password after reopen = %q (nil %t), %v", pw, pw == nil, err)
	}
	if err := s.SetPassword(t.Context(), "u-a", []byte("x")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second SetPassword after reopen: %v, want conflict", err)
	}
	if _, err := s.Password(t.Context(), "u-b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Password of u-b: %v, want not found", err)
	}
}

// TestInstanceHosts: the counts by host are what decoding every record
// finds, records without a host (written before hosts were tracked)
// counted under "".
func TestInstanceHosts(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	hostsOf := []string{"a", "b", "a", "", "a"}
	for i, h := range hostsOf {
		in := store.Instance{Name: fmt.Sprintf("vm-%d", i), UUID: fmt.Sprintf("u-%d", i), Host: h, Spec: []byte(`{"name":"x"}`)}
		if _, _, err := s.Put(t.Context(), in, store.Document{Tree: []byte("t")}, 0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.InstanceHosts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.Instances(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, r := range recs {
		want[r.Host]++
	}
	if !maps.Equal(got, want) || got["a"] != 3 || got[""] != 1 {
		t.Errorf("InstanceHosts = %v; decoding every record says %v", got, want)
	}
}
