package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/internal/store"
)

// groupTests are the conformance tests of store.Groups.
var groupTests = []struct {
	name string
	fn   func(t *testing.T, s store.Groups)
}{
	{"GroupCommitAndList", testGroupCommitAndList},
	{"GroupAllOrNothing", testGroupAllOrNothing},
	{"GroupDeleteAndCheck", testGroupDeleteAndCheck},
	{"GroupInvalid", testGroupInvalid},
	{"GroupsApart", testGroupsApart},
	{"GroupConcurrentClaims", testGroupConcurrentClaims},
}

func groups(t *testing.T, s store.Store) store.Groups {
	t.Helper()
	g, ok := s.(store.Groups)
	if !ok {
		t.Fatalf("%T does not implement store.Groups", s)
	}
	return g
}

func commit(t *testing.T, g store.Groups, group string, ops ...store.GroupOp) []store.Record {
	t.Helper()
	recs, err := g.CommitGroup(t.Context(), group, ops)
	if err != nil {
		t.Fatalf("CommitGroup(%s): %v", group, err)
	}
	return recs
}

func gput(key, value string, expect int64) store.GroupOp {
	return store.GroupOp{Key: key, Value: []byte(value), ExpectVersion: expect}
}

// groupString prints a group as key=value@version, sorted.
func groupString(t *testing.T, g store.Groups, group string) string {
	t.Helper()
	recs, err := g.GroupRecords(t.Context(), group)
	if err != nil {
		t.Fatalf("GroupRecords(%s): %v", group, err)
	}
	var b []string
	for _, r := range recs {
		b = append(b, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Version))
	}
	return strings.Join(b, " ")
}

func testGroupCommitAndList(t *testing.T, s store.Groups) {
	if got := groupString(t, s, "device/h1"); got != "" {
		t.Fatalf("empty group lists %q", got)
	}
	recs := commit(t, s, "device/h1", gput("dev/0000:3b:00.0", "a", 0), gput("dev/0000:3a:00.0", "b", 0))
	if recs[0].Version != 1 || recs[1].Version != 1 || string(recs[0].Value) != "a" {
		t.Fatalf("created %+v, want version 1 each", recs)
	}
	commit(t, s, "device/h1", gput("dev/0000:3b:00.0", "a2", 1), gput("alloc/i-1", "x", 0))
	if got, want := groupString(t, s, "device/h1"), "alloc/i-1=x@1 dev/0000:3a:00.0=b@1 dev/0000:3b:00.0=a2@2"; got != want {
		t.Fatalf("group = %q, want %q", got, want)
	}
	commit(t, s, "device/h1", gput("dev/0000:3a:00.0", "", -1))
	if got, want := groupString(t, s, "device/h1"), "alloc/i-1=x@1 dev/0000:3a:00.0=@2 dev/0000:3b:00.0=a2@2"; got != want {
		t.Fatalf("after an empty value, group = %q, want %q", got, want)
	}
}

func testGroupAllOrNothing(t *testing.T, s store.Groups) {
	commit(t, s, "g", gput("a", "1", 0), gput("b", "1", 0))
	for _, ops := range [][]store.GroupOp{
		{gput("a", "2", 1), gput("b", "2", 2)},                           // second stale
		{gput("a", "2", 2), gput("b", "2", 1)},                           // first stale
		{gput("a", "2", 1), gput("c", "2", 1)},                           // c does not exist
		{gput("a", "2", 1), gput("b", "2", 0)},                           // b exists
		{gput("a", "2", 1), {Key: "c", Delete: true, ExpectVersion: -1}}, // delete a missing one
		{gput("a", "2", 1), {Key: "b", Check: true, ExpectVersion: 7}},
	} {
		_, err := s.CommitGroup(t.Context(), "g", ops)
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("CommitGroup(%+v) = %v, want ErrConflict", ops, err)
		}
		if got, want := groupString(t, s, "g"), "a=1@1 b=1@1"; got != want {
			t.Fatalf("after a refused commit, group = %q, want %q (nothing changed)", got, want)
		}
	}
	_, err := s.CommitGroup(t.Context(), "g", []store.GroupOp{gput("a", "2", 1), gput("b", "2", 7)})
	if err == nil || !strings.Contains(err.Error(), "b") {
		t.Fatalf("conflict error %v does not name the key b", err)
	}
}

func testGroupDeleteAndCheck(t *testing.T, s store.Groups) {
	commit(t, s, "g", gput("a", "1", 0), gput("b", "1", 0))
	recs := commit(t, s, "g", store.GroupOp{Key: "a", Delete: true, ExpectVersion: 1}, store.GroupOp{Key: "b", Check: true, ExpectVersion: 1}, gput("c", "1", 0))
	if recs[0].Version != 0 || recs[1].Version != 1 || recs[2].Version != 1 {
		t.Fatalf("commit returned %+v", recs)
	}
	if got, want := groupString(t, s, "g"), "b=1@1 c=1@1"; got != want {
		t.Fatalf("group = %q, want %q", got, want)
	}
	// Created again, a record starts at version 1.
	if recs := commit(t, s, "g", gput("a", "x", 0)); recs[0].Version != 1 {
		t.Fatalf("re-created at version %d, want 1", recs[0].Version)
	}
}

func testGroupInvalid(t *testing.T, s store.Groups) {
	for name, tc := range map[string]struct {
		group string
		ops   []store.GroupOp
	}{
		"bad group":       {"a b", []store.GroupOp{gput("a", "1", 0)}},
		"braces in group": {"{x}", []store.GroupOp{gput("a", "1", 0)}},
		"no ops":          {"g", nil},
		"bad key":         {"g", []store.GroupOp{gput("a*", "1", 0)}},
		"key twice":       {"g", []store.GroupOp{gput("a", "1", 0), gput("a", "2", -1)}},
		"delete expect 0": {"g", []store.GroupOp{{Key: "a", Delete: true}}},
		"delete & check":  {"g", []store.GroupOp{{Key: "a", Delete: true, Check: true, ExpectVersion: -1}}},
	} {
		if _, err := s.CommitGroup(t.Context(), tc.group, tc.ops); err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: CommitGroup = %v, want a validation error", name, err)
		}
	}
	if _, err := s.GroupRecords(t.Context(), "a b"); err == nil {
		t.Errorf("GroupRecords of a bad name: no error")
	}
	if got := groupString(t, s, "g"); got != "" {
		t.Errorf("refused commits left %q", got)
	}
}

// Groups are apart from each other and from Records.
func testGroupsApart(t *testing.T, s store.Groups) {
	commit(t, s, "g1", gput("a", "1", 0))
	commit(t, s, "g1/sub", gput("a", "2", 0))
	commit(t, s, "g2", gput("a", "3", 0))
	for group, want := range map[string]string{"g1": "a=1@1", "g1/sub": "a=2@1", "g2": "a=3@1"} {
		if got := groupString(t, s, group); got != want {
			t.Errorf("group %s = %q, want %q", group, got, want)
		}
	}
	if r, ok := s.(store.Records); ok {
		list, err := r.Records(t.Context(), "")
		if err != nil || len(list) != 0 {
			t.Errorf("Records lists %v (%v), want no records from groups", list, err)
		}
	}
}

// Many claimers race for a few items: each reads the group, picks a free
// item at random and claims it with its version; every item is claimed
// exactly once, by exactly one claimer.
func testGroupConcurrentClaims(t *testing.T, s store.Groups) {
	const items, claimers = 5, 40
	var ops []store.GroupOp
	for i := range items {
		ops = append(ops, gput(fmt.Sprintf("item/%d", i), "free", 0))
	}
	commit(t, s, "pool", ops...)
	var wg sync.WaitGroup
	won := make([]string, claimers)
	errs := make(chan error, claimers)
	for c := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				recs, err := s.GroupRecords(t.Context(), "pool")
				if err != nil {
					errs <- err
					return
				}
				var free []store.Record
				for _, r := range recs {
					if string(r.Value) == "free" {
						free = append(free, r)
					}
				}
				if len(free) == 0 {
					return
				}
				r := free[rand.IntN(len(free))]
				_, err = s.CommitGroup(t.Context(), "pool", []store.GroupOp{
					gput(r.Key, fmt.Sprint("claimer-", c), r.Version),
					gput(fmt.Sprint("claim/", c), r.Key, 0),
				})
				if errors.Is(err, store.ErrConflict) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				won[c] = r.Key
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	recs, err := s.GroupRecords(t.Context(), "pool")
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]string{} // claimer -> item its claim record names
	for _, r := range recs {
		if k, ok := strings.CutPrefix(r.Key, "claim/"); ok {
			owners["claimer-"+k] = string(r.Value)
		}
	}
	if len(owners) != items {
		t.Errorf("%d claims recorded, want %d", len(owners), items)
	}
	held := 0
	for _, r := range recs {
		if strings.HasPrefix(r.Key, "item/") {
			if owners[string(r.Value)] != r.Key {
				t.Errorf("%s held by %s, whose claim record says %q", r.Key, r.Value, owners[string(r.Value)])
			}
			held++
		}
	}
	for c, key := range won {
		if key != "" && owners[fmt.Sprint("claimer-", c)] != key {
			t.Errorf("claimer %d won %s, the store says %q", c, key, owners[fmt.Sprint("claimer-", c)])
		}
	}
	t.Logf("%d claimers, %d items: %d claims, %d items held", claimers, items, len(owners), held)
}
