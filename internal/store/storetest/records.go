package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/internal/store"
)

// recordTests are the conformance tests of store.Records.
var recordTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"RecordCreateGetUpdate", testRecordCreateGetUpdate},
	{"RecordCompareAndSwap", testRecordCAS},
	{"RecordDelete", testRecordDelete},
	{"RecordsByPrefix", testRecordsByPrefix},
	{"RecordKeys", testRecordKeys},
	{"RecordsConcurrentIncrements", testRecordsConcurrent},
	{"UpdateConcurrentIncrements", testUpdateConcurrent},
	{"RecordsApartFromInstances", testRecordsApart},
	{"RecordsCanceledContext", testRecordsCanceled},
}

func putRecord(t *testing.T, s store.Records, key, value string, expect int64) store.Record {
	t.Helper()
	rec, err := s.PutRecord(t.Context(), key, []byte(value), expect)
	if err != nil {
		t.Fatalf("PutRecord(%s, expect %d): %v", key, expect, err)
	}
	return rec
}

// wantRecord checks the stored record under key.
func wantRecord(t *testing.T, s store.Records, key, value string, version int64) {
	t.Helper()
	rec, err := s.Record(t.Context(), key)
	if err != nil {
		t.Fatalf("Record(%s): %v", key, err)
	}
	if rec.Key != key || string(rec.Value) != value || rec.Version != version {
		t.Fatalf("Record(%s) = {%s %q v%d}, want {%s %q v%d}", key, rec.Key, rec.Value, rec.Version, key, value, version)
	}
}

func wantNoRecord(t *testing.T, s store.Records, key string) {
	t.Helper()
	_, err := s.Record(t.Context(), key)
	wantErrIs(t, "Record("+key+")", err, store.ErrNotFound)
}

func testRecordCreateGetUpdate(t *testing.T, s store.Store) {
	wantNoRecord(t, s, "flavor/m1.small")
	value := []byte(`{"vcpus":1}`)
	rec, err := s.PutRecord(t.Context(), "flavor/m1.small", value, 0)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if rec.Key != "flavor/m1.small" || string(rec.Value) != `{"vcpus":1}` || rec.Version != 1 {
		t.Fatalf("PutRecord returned %+v, want version 1", rec)
	}
	value[0] = 'X' // the store keeps its own copy
	rec.Value[1] = 'Y'
	wantRecord(t, s, "flavor/m1.small", `{"vcpus":1}`, 1)

	if rec := putRecord(t, s, "flavor/m1.small", `{"vcpus":2}`, 1); rec.Version != 2 {
		t.Fatalf("update with the right version: %+v, want version 2", rec)
	}
	if rec := putRecord(t, s, "flavor/m1.small", `{"vcpus":3}`, -1); rec.Version != 3 {
		t.Fatalf("unconditional update: %+v, want version 3", rec)
	}
	wantRecord(t, s, "flavor/m1.small", `{"vcpus":3}`, 3)

	// An unconditional put creates too.
	if rec := putRecord(t, s, "flavor/m1.large", "l", -1); rec.Version != 1 {
		t.Fatalf("unconditional create: %+v, want version 1", rec)
	}

	// Values are bytes: empty, binary, large.
	putRecord(t, s, "empty", "", 0)
	rec, err = s.Record(t.Context(), "empty")
	if err != nil || rec.Value == nil || len(rec.Value) != 0 || rec.Version != 1 {
		t.Fatalf("Record(empty) = %+v, %v; want an empty, non-nil value", rec, err)
	}
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	large := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for key, v := range map[string][]byte{"binary": binary, "large": large} {
		if _, err := s.PutRecord(t.Context(), key, v, 0); err != nil {
			t.Fatalf("PutRecord(%s): %v", key, err)
		}
		rec, err := s.Record(t.Context(), key)
		if err != nil || !bytes.Equal(rec.Value, v) {
			t.Fatalf("Record(%s): %d bytes, %v; want the %d bytes put", key, len(rec.Value), err, len(v))
		}
	}
}

func testRecordCAS(t *testing.T, s store.Store) {
	ctx := t.Context()
	putRecord(t, s, "share/data", "v1", 0)
	putRecord(t, s, "share/data", "v2", 1)

	for _, tc := range []struct {
		name   string
		expect int64
		want   []string // in the error text
	}{
		{"create over an existing record", 0, []string{"share/data", "version 2"}},
		{"stale version", 1, []string{"share/data", "version is 2", "expected 1"}},
		{"future version", 7, []string{"share/data", "version is 2", "expected 7"}},
	} {
		_, err := s.PutRecord(ctx, "share/data", []byte("lost"), tc.expect)
		wantErrIs(t, tc.name, err, store.ErrConflict)
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tc.name, err, w)
			}
		}
		wantRecord(t, s, "share/data", "v2", 2) // unchanged
	}

	// Expecting a version of a record that does not exist creates nothing.
	_, err := s.PutRecord(ctx, "share/none", []byte("x"), 1)
	wantErrIs(t, "put expecting version 1 of a missing record", err, store.ErrConflict)
	if !strings.Contains(err.Error(), "share/none") || !strings.Contains(err.Error(), "expected version 1") {
		t.Errorf("error %q should name the key and the version", err)
	}
	wantNoRecord(t, s, "share/none")

	putRecord(t, s, "share/data", "v3", 2)
	wantRecord(t, s, "share/data", "v3", 3)
}

func testRecordDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, expect := range []int64{-1, 0, 1} {
		err := s.DeleteRecord(ctx, "image/none", expect)
		wantErrIs(t, fmt.Sprintf("DeleteRecord of a missing record, expect %d", expect), err, store.ErrNotFound)
		if !strings.Contains(err.Error(), "image/none") {
			t.Errorf("error %q does not name the key", err)
		}
	}

	putRecord(t, s, "image/debian", "a", 0)
	putRecord(t, s, "image/debian", "b", 1)
	for _, expect := range []int64{0, 1, 3} {
		err := s.DeleteRecord(ctx, "image/debian", expect)
		wantErrIs(t, fmt.Sprintf("DeleteRecord expecting %d of version 2", expect), err, store.ErrConflict)
		if !strings.Contains(err.Error(), "image/debian") {
			t.Errorf("error %q does not name the key", err)
		}
		wantRecord(t, s, "image/debian", "b", 2)
	}
	if err := s.DeleteRecord(ctx, "image/debian", 2); err != nil {
		t.Fatalf("DeleteRecord with the right version: %v", err)
	}
	wantNoRecord(t, s, "image/debian")
	wantErrIs(t, "second delete", s.DeleteRecord(ctx, "image/debian", -1), store.ErrNotFound)

	// Created again, it starts over at version 1.
	if rec := putRecord(t, s, "image/debian", "c", 0); rec.Version != 1 {
		t.Fatalf("re-created record has version %d, want 1", rec.Version)
	}
	if err := s.DeleteRecord(ctx, "image/debian", -1); err != nil {
		t.Fatalf("unconditional delete: %v", err)
	}
	wantNoRecord(t, s, "image/debian")
}

func recordKeys(list []store.Record) []string {
	keys := make([]string, len(list))
	for i, r := range list {
		keys[i] = r.Key
	}
	return keys
}

func testRecordsByPrefix(t *testing.T, s store.Store) {
	ctx := t.Context()
	keys := []string{"a", "a/2", "a/1", "a/b/3", "a/x-1", "a/x.1", "a/x:1", "a/x_1", "ab/1", "a-", "a.b", "b/1", "B/1", "0/1"}
	for i, k := range keys {
		putRecord(t, s, k, "v"+strconv.Itoa(i), 0)
	}
	putRecord(t, s, "a/1", "updated", 1)
	sorted := slices.Sorted(slices.Values(keys))
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", sorted},
		{"a/", []string{"a/1", "a/2", "a/b/3", "a/x-1", "a/x.1", "a/x:1", "a/x_1"}},
		{"a/x", []string{"a/x-1", "a/x.1", "a/x:1", "a/x_1"}},
		{"a/b/", []string{"a/b/3"}},
		{"ab/", []string{"ab/1"}},
		{"a", []string{"a", "a-", "a.b", "a/1", "a/2", "a/b/3", "a/x-1", "a/x.1", "a/x:1", "a/x_1", "ab/1"}},
		{"b/", []string{"b/1"}}, // not "B/1": keys are case-sensitive
		{"a/1", []string{"a/1"}},
		{"c/", nil},
		{"a/1/", nil},
	} {
		list, err := s.Records(ctx, tc.prefix)
		if err != nil {
			t.Fatalf("Records(%q): %v", tc.prefix, err)
		}
		if got := recordKeys(list); !slices.Equal(got, tc.want) {
			t.Errorf("Records(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
		for _, r := range list {
			if r.Key == "a/1" && (string(r.Value) != "updated" || r.Version != 2) {
				t.Errorf("Records(%q) lists a/1 as %q v%d, want \"updated\" v2", tc.prefix, r.Value, r.Version)
			}
		}
	}
	if err := s.DeleteRecord(ctx, "a/2", -1); err != nil {
		t.Fatal(err)
	}
	list, err := s.Records(ctx, "a/")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := recordKeys(list), []string{"a/1", "a/b/3", "a/x-1", "a/x.1", "a/x:1", "a/x_1"}; !slices.Equal(got, want) {
		t.Errorf("Records(a/) after a delete = %q, want %q", got, want)
	}
}

func testRecordKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	longest := strings.Repeat("k", store.MaxKeyLen)
	for _, key := range []string{"x", "flavor/m1.small", "device/0000:3b:00.0", "host/node-1.example", "A_Z-09.:x", longest} {
		if _, err := s.PutRecord(ctx, key, []byte("ok"), 0); err != nil {
			t.Fatalf("PutRecord(%.40q): %v", key, err)
		}
		wantRecord(t, s, key, "ok", 1)
	}
	for _, tc := range []struct{ name, key, want string }{
		{"empty", "", "empty"},
		{"too long", longest + "k", "longer than 512 bytes"},
		{"leading slash", "/a", `starts or ends with "/"`},
		{"trailing slash", "a/", `starts or ends with "/"`},
		{"empty segment", "a//b", `contains "//"`},
		{"space", "a b", `" "`},
		{"glob star", "a*", `"*"`},
		{"glob class", "a[b]", `"["`},
		{"hash tag", "a{b}", `"{"`},
		{"backslash", `a\b`, `"\\"`},
		{"control character", "a\nb", `"\n"`},
		{"NUL", "a\x00", `"\x00"`},
		{"non-ASCII", "café", "at byte 3"},
		{"invalid UTF-8", "a\xff", `"\xff"`},
	} {
		calls := map[string]func() error{
			"PutRecord":    func() error { _, err := s.PutRecord(ctx, tc.key, []byte("x"), -1); return err },
			"Record":       func() error { _, err := s.Record(ctx, tc.key); return err },
			"DeleteRecord": func() error { return s.DeleteRecord(ctx, tc.key, -1) },
		}
		for name, call := range calls {
			err := call()
			if !errors.Is(err, store.ErrInvalidKey) {
				t.Errorf("%s with key %s (%.40q): error %v, want invalid key", name, tc.name, tc.key, err)
				continue
			}
			if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
				t.Errorf("%s with key %s: %v should be neither not found nor conflict", name, tc.name, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s with key %s: error %q does not say %q", name, tc.name, err, tc.want)
			}
		}
	}
	for _, prefix := range []string{"/", "/a", "a//", "a b", "a*", longest + "k"} {
		if _, err := s.Records(ctx, prefix); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Records(%.40q): %v, want invalid key", prefix, err)
		}
	}
	list, err := s.Records(ctx, "")
	if err != nil || len(list) != 6 {
		t.Fatalf("Records after invalid puts = %q, %v; want the 6 valid records only", recordKeys(list), err)
	}
}

// testRecordsConcurrent: workers increment one counter with
// read-modify-CAS loops; no increment is lost.
func testRecordsConcurrent(t *testing.T, s store.Store) {
	const workers, increments = 8, 10
	ctx := t.Context()
	putRecord(t, s, "counter", "0", 0)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for done := 0; done < increments; {
				rec, err := s.Record(ctx, "counter")
				if err != nil {
					errs <- err
					return
				}
				n, err := strconv.Atoi(string(rec.Value))
				if err != nil {
					errs <- err
					return
				}
				_, err = s.PutRecord(ctx, "counter", []byte(strconv.Itoa(n+1)), rec.Version)
				switch {
				case err == nil:
					done++
				case !errors.Is(err, store.ErrConflict):
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wantRecord(t, s, "counter", strconv.Itoa(workers*increments), 1+workers*increments)
}

// testUpdateConcurrent: workers increment one counter through
// store.Update, the first creating it; no increment is lost, and an
// Update that writes nothing leaves the version alone.
func testUpdateConcurrent(t *testing.T, s store.Store) {
	const workers, increments = 8, 10
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range increments {
				_, err := store.Update(ctx, s, "counter", func(old store.Record, exists bool) ([]byte, error) {
					n := 0
					if exists {
						var err error
						if n, err = strconv.Atoi(string(old.Value)); err != nil {
							return nil, err
						}
					}
					return []byte(strconv.Itoa(n + 1)), nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := strconv.Itoa(workers * increments)
	wantRecord(t, s, "counter", want, workers*increments)
	rec, err := store.Update(ctx, s, "counter", func(store.Record, bool) ([]byte, error) { return nil, nil })
	if err != nil || string(rec.Value) != want || rec.Version != workers*increments {
		t.Fatalf("Update writing nothing = %q v%d, %v; want %s v%d as read", rec.Value, rec.Version, err, want, workers*increments)
	}
	wantRecord(t, s, "counter", want, workers*increments)
}

// testRecordsApart: records and instances do not see each other.
func testRecordsApart(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := newInstance("vm", uuidOf(1), "10.0.0.1")
	put(t, s, in, "t", 0)
	putRecord(t, s, "vm", "a record named like the instance", 0)
	putRecord(t, s, uuidOf(1), "and one like its uuid", 0)
	list, err := s.Instances(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "vm" {
		t.Fatalf("Instances = %+v, %v; want vm alone", list, err)
	}
	if err := s.Delete(ctx, "vm"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantRecord(t, s, "vm", "a record named like the instance", 1)
	wantRecord(t, s, uuidOf(1), "and one like its uuid", 1)
	if err := s.DeleteRecord(ctx, "vm", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Instance(ctx, "vm"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Instance after the record was deleted: %v", err)
	}
}

func testRecordsCanceled(t *testing.T, s store.Store) {
	putRecord(t, s, "r", "v", 0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := map[string]func() error{
		"Record":        func() error { _, err := s.Record(ctx, "r"); return err },
		"PutRecord":     func() error { _, err := s.PutRecord(ctx, "r", []byte("changed"), -1); return err },
		"PutRecord new": func() error { _, err := s.PutRecord(ctx, "new", []byte("x"), 0); return err },
		"DeleteRecord":  func() error { return s.DeleteRecord(ctx, "r", -1) },
		"Records":       func() error { _, err := s.Records(ctx, ""); return err },
	}
	for name, call := range calls {
		wantErrIs(t, name+" with a canceled context", call(), context.Canceled)
	}
	wantRecord(t, s, "r", "v", 1)
	wantNoRecord(t, s, "new")
}
