package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/internal/store"
)

// batchTests are the conformance tests of store.RecordBatches.
var batchTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"PutRecordsCompareAndSwapEach", testPutRecordsCAS},
	{"PutRecordsInvalid", testPutRecordsInvalid},
	{"PutRecordsFullBatch", testPutRecordsFull},
	{"PutRecordsConcurrent", testPutRecordsConcurrent},
	{"PutRecordsCanceledContext", testPutRecordsCanceled},
}

// testPutRecordsCAS: every write is its own compare-and-swap; conflicts
// are per write and leave their record unchanged, the others apply.
func testPutRecordsCAS(t *testing.T, s store.Store) {
	ctx := t.Context()
	putRecord(t, s, "b/exists", "e1", 0)
	putRecord(t, s, "b/update", "u1", 0)
	putRecord(t, s, "b/update", "u2", 1)
	putRecord(t, s, "b/stale", "s1", 0)
	putRecord(t, s, "b/any", "a1", 0)
	writes := []store.RecordWrite{
		{Key: "b/new", Value: []byte("n1"), ExpectVersion: 0},
		{Key: "b/exists", Value: []byte("e-over"), ExpectVersion: 0},  // conflict: exists
		{Key: "b/update", Value: []byte("u3"), ExpectVersion: 2},      // ok
		{Key: "b/stale", Value: []byte("s-over"), ExpectVersion: 5},   // conflict: stale
		{Key: "b/missing", Value: []byte("m-over"), ExpectVersion: 3}, // conflict: missing
		{Key: "b/any", Value: []byte("a2"), ExpectVersion: -1},        // ok, any version
		{Key: "b/empty", Value: nil, ExpectVersion: -1},               // ok, creates an empty value
	}
	res, err := s.PutRecords(ctx, writes)
	if err != nil {
		t.Fatalf("PutRecords: %v", err)
	}
	if len(res) != len(writes) {
		t.Fatalf("PutRecords: %d results for %d writes", len(res), len(writes))
	}
	want := []struct {
		version  int64
		conflict string
	}{{1, ""}, {0, "version 1"}, {3, ""}, {0, "expected 5"}, {0, "does not exist"}, {2, ""}, {1, ""}}
	for i, w := range want {
		r := res[i]
		if w.conflict != "" {
			if !errors.Is(r.Err, store.ErrConflict) || !strings.Contains(r.Err.Error(), writes[i].Key) || !strings.Contains(r.Err.Error(), w.conflict) {
				t.Errorf("write %d (%s): %v; want a conflict naming the key and %q", i, writes[i].Key, r.Err, w.conflict)
			}
			continue
		}
		if r.Err != nil || r.Record.Key != writes[i].Key || r.Record.Version != w.version || string(r.Record.Value) != string(writes[i].Value) {
			t.Errorf("write %d (%s): %+v, %v; want version %d", i, writes[i].Key, r.Record, r.Err, w.version)
		}
	}
	wantRecord(t, s, "b/new", "n1", 1)
	wantRecord(t, s, "b/exists", "e1", 1)
	wantRecord(t, s, "b/update", "u3", 3)
	wantRecord(t, s, "b/stale", "s1", 1)
	wantNoRecord(t, s, "b/missing")
	wantRecord(t, s, "b/any", "a2", 2)
	wantRecord(t, s, "b/empty", "", 1)
	// The store keeps its own copy of a value.
	writes[0].Value[0] = 'X'
	wantRecord(t, s, "b/new", "n1", 1)
}

// testPutRecordsInvalid: a malformed batch is refused as a whole.
func testPutRecordsInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	putRecord(t, s, "i/a", "a1", 0)
	tooMany := make([]store.RecordWrite, store.MaxRecordWrites+1)
	for i := range tooMany {
		tooMany[i] = store.RecordWrite{Key: fmt.Sprintf("i/many/%d", i), Value: []byte("x"), ExpectVersion: -1}
	}
	for _, tc := range []struct {
		name   string
		writes []store.RecordWrite
		want   string
	}{
		{"none", nil, "0 writes"},
		{"too many", tooMany, fmt.Sprintf("%d writes", store.MaxRecordWrites+1)},
		{"duplicate key", []store.RecordWrite{{Key: "i/a", ExpectVersion: -1}, {Key: "i/b", ExpectVersion: -1}, {Key: "i/a", ExpectVersion: -1}}, "write 2: key i/a appears twice"},
		{"invalid key", []store.RecordWrite{{Key: "i/b", ExpectVersion: -1}, {Key: "i/a b", ExpectVersion: -1}}, "write 1"},
	} {
		_, err := s.PutRecords(ctx, tc.writes)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: PutRecords = %v; want an error containing %q", tc.name, err, tc.want)
		}
	}
	wantRecord(t, s, "i/a", "a1", 1)
	wantNoRecord(t, s, "i/b")
	if list, err := s.Records(ctx, "i/many/"); err != nil || len(list) != 0 {
		t.Fatalf("Records(i/many/) = %d, %v; want none", len(list), err)
	}
}

// testPutRecordsFull: a batch of MaxRecordWrites (on a cluster, keys on
// every node) is stored whole, and a second one updates each record.
func testPutRecordsFull(t *testing.T, s store.Store) {
	ctx := t.Context()
	writes := make([]store.RecordWrite, store.MaxRecordWrites)
	for i := range writes {
		writes[i] = store.RecordWrite{Key: fmt.Sprintf("f/%04d", i), Value: []byte("v1-" + strconv.Itoa(i))}
	}
	for round := int64(0); round < 2; round++ {
		res, err := s.PutRecords(ctx, writes)
		if err != nil {
			t.Fatalf("round %d: PutRecords: %v", round, err)
		}
		for i, r := range res {
			if r.Err != nil || r.Record.Version != round+1 {
				t.Fatalf("round %d: write %d: %+v, %v", round, i, r.Record, r.Err)
			}
			writes[i].ExpectVersion = r.Record.Version
			writes[i].Value = []byte(fmt.Sprintf("v%d-%d", round+2, i))
		}
	}
	list, err := s.Records(ctx, "f/")
	if err != nil || len(list) != store.MaxRecordWrites {
		t.Fatalf("Records(f/) = %d records, %v; want %d", len(list), err, store.MaxRecordWrites)
	}
	for i, r := range list {
		if r.Version != 2 || string(r.Value) != fmt.Sprintf("v2-%d", i) {
			t.Fatalf("record %s = %q v%d", r.Key, r.Value, r.Version)
		}
	}
}

// testPutRecordsConcurrent: batches racing on the same counters lose no
// update (each write's compare-and-swap is atomic; a conflict re-reads).
func testPutRecordsConcurrent(t *testing.T, s store.Store) {
	const workers, increments, counters = 4, 5, 16
	ctx := t.Context()
	for c := range counters {
		putRecord(t, s, fmt.Sprintf("c/%02d", c), "0", 0)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			done := make([]int, counters)
			for {
				var writes []store.RecordWrite
				for c := range counters {
					if done[c] == increments {
						continue
					}
					key := fmt.Sprintf("c/%02d", c)
					rec, err := s.Record(ctx, key)
					if err != nil {
						errs <- err
						return
					}
					n, _ := strconv.Atoi(string(rec.Value))
					writes = append(writes, store.RecordWrite{Key: key, Value: []byte(strconv.Itoa(n + 1)), ExpectVersion: rec.Version})
				}
				if len(writes) == 0 {
					return
				}
				res, err := s.PutRecords(ctx, writes)
				if err != nil {
					errs <- err
					return
				}
				for i, r := range res {
					c, _ := strconv.Atoi(strings.TrimPrefix(writes[i].Key, "c/"))
					switch {
					case r.Err == nil:
						done[c]++
					case !errors.Is(r.Err, store.ErrConflict):
						errs <- r.Err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for c := range counters {
		wantRecord(t, s, fmt.Sprintf("c/%02d", c), strconv.Itoa(workers*increments), 1+workers*increments)
	}
}

func testPutRecordsCanceled(t *testing.T, s store.Store) {
	putRecord(t, s, "r", "v", 0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.PutRecords(ctx, []store.RecordWrite{{Key: "r", Value: []byte("changed"), ExpectVersion: -1}, {Key: "new", Value: []byte("x")}})
	wantErrIs(t, "PutRecords with a canceled context", err, context.Canceled)
	wantRecord(t, s, "r", "v", 1)
	wantNoRecord(t, s, "new")
}
