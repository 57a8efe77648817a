// Package storetest is the conformance suite of store.Store: every backend's
// tests call Run, so bolt and redis are held to exactly the same behaviour
// (atomic, all-or-nothing Put; conflicts; revisions and versions; address
// index; secrets; concurrency) and the versioned records (compare-and-swap,
// listing by prefix, key rules, lost-update freedom). It also holds the
// benchmarks both backends report (BenchmarkPut, BenchmarkDocument).
//
// Watch is checked with a second client of the same store (WithPeer): a
// change made through either reaches the other's watchers.
//
// Only _test.go files should import this package.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/internal/store"
)

// Option adjusts Run.
type Option func(*config)

type config struct {
	peer func(t *testing.T, s store.Store) store.Store
}

// WithPeer gives Run a second client of the same store as s (a second
// Open of the same Redis URL), so that the suite can check that one client
// sees another's changes, through Watch in particular. The peer is closed
// by the caller (t.Cleanup). Without it the suite uses s itself, which is
// right for bolt: one process has the file.
func WithPeer(peer func(t *testing.T, s store.Store) store.Store) Option {
	return func(c *config) { c.peer = peer }
}

// Run runs the conformance suite. open must return a new, empty store for
// each subtest (subtests run one after another, so it may reuse one server);
// Run closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) store.Store, opts ...Option) {
	cfg := config{peer: func(_ *testing.T, s store.Store) store.Store { return s }}
	for _, o := range opts {
		o(&cfg)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CreateGetList", testCreateGetList},
		{"UpdateBumpsRevisionAndVersion", testUpdateBumps},
		{"ExpectRevision", testExpectRevision},
		{"NameHeldByOtherUUID", testNameHeld},
		{"UUIDHeldByOtherName", testUUIDHeld},
		{"AddressHeldByOtherInstance", testAddressHeld},
		{"AddressesReleased", testAddressesReleased},
		{"LookupAddress", testLookupAddress},
		{"Delete", testDelete},
		{"NotFound", testNotFound},
		{"InvalidInput", testInvalidInput},
		{"Secrets", testSecrets},
		{"ConcurrentPuts", testConcurrentPuts},
		{"ConcurrentCompareAndSwap", testConcurrentCAS},
		{"ConcurrentAddressClaims", testConcurrentAddressClaims},
		{"ConcurrentAddressChanges", testConcurrentAddressChanges},
		{"LargeDocument", testLargeDocument},
		{"CanceledContext", testCanceledContext},
		{"Password", testPassword},
		{"PasswordConcurrent", testPasswordConcurrent},
		{"Ping", testPing},
		{"WatchPutAndDelete", func(t *testing.T, s store.Store) { testWatch(t, s, cfg.peer(t, s)) }},
		{"WatchOwnWrites", func(t *testing.T, s store.Store) { testWatch(t, s, s) }},
		{"WatchCancel", testWatchCancel},
		{"WatchConcurrentWatchers", func(t *testing.T, s store.Store) { testWatchConcurrent(t, s, cfg.peer(t, s)) }},
		{"WatchKeyChanges", func(t *testing.T, s store.Store) { testWatchKeys(t, s, cfg.peer(t, s)) }},
	}
	tests = append(tests, recordTests...)
	tests = append(tests, batchTests...)
	for _, g := range groupTests {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, s store.Store)
		}{g.name, func(t *testing.T, s store.Store) { g.fn(t, groups(t, s)) }})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close store: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// Fixtures.

func uuidOf(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

func newInstance(name, uuid string, addrs ...string) store.Instance {
	return store.Instance{
		Name:      name,
		UUID:      uuid,
		ProjectID: "p-" + name,
		Addresses: addrs,
		Spec:      []byte(`{"name":"` + name + `"}`),
	}
}

func newDocument(inst store.Instance, tree string) store.Document {
	return store.Document{
		InstanceUUID: inst.UUID,
		ProjectID:    inst.ProjectID,
		Addresses:    inst.Addresses,
		Tree:         []byte(tree),
	}
}

func put(t *testing.T, s store.Store, inst store.Instance, tree string, expect int64) (store.Instance, store.Document) {
	t.Helper()
	gotInst, gotDoc, err := s.Put(t.Context(), inst, newDocument(inst, tree), expect)
	if err != nil {
		t.Fatalf("Put(%s, expect %d): %v", inst.Name, expect, err)
	}
	return gotInst, gotDoc
}

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
}

func getInstance(t *testing.T, s store.Store, name string) store.Instance {
	t.Helper()
	inst, err := s.Instance(t.Context(), name)
	if err != nil {
		t.Fatalf("Instance(%s): %v", name, err)
	}
	return inst
}

func getDocument(t *testing.T, s store.Store, uuid string) store.Document {
	t.Helper()
	doc, err := s.Document(t.Context(), uuid)
	if err != nil {
		t.Fatalf("Document(%s): %v", uuid, err)
	}
	return doc
}

func wantEqual[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func wantOwner(t *testing.T, s store.Store, addr, uuid string) {
	t.Helper()
	got, err := s.LookupAddress(t.Context(), addr)
	if err != nil {
		t.Fatalf("LookupAddress(%s): %v", addr, err)
	}
	if got != uuid {
		t.Fatalf("LookupAddress(%s) = %s, want %s", addr, got, uuid)
	}
}

func wantNoOwner(t *testing.T, s store.Store, addr string) {
	t.Helper()
	_, err := s.LookupAddress(t.Context(), addr)
	wantErrIs(t, "LookupAddress("+addr+")", err, store.ErrNotFound)
}

// snapshot is everything the store says about some instances, to prove that
// a refused call changed nothing.
type snapshot struct {
	instances []store.Instance
	documents map[string]store.Document
	owners    map[string]string
}

func takeSnapshot(t *testing.T, s store.Store, addrs ...string) snapshot {
	t.Helper()
	list, err := s.Instances(t.Context())
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	snap := snapshot{instances: list, documents: map[string]store.Document{}, owners: map[string]string{}}
	for _, inst := range list {
		snap.documents[inst.UUID] = getDocument(t, s, inst.UUID)
		addrs = append(addrs, inst.Addresses...)
	}
	for _, a := range addrs {
		if uuid, err := s.LookupAddress(t.Context(), a); err == nil {
			snap.owners[a] = uuid
		} else if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("LookupAddress(%s): %v", a, err)
		}
	}
	return snap
}

func wantUnchanged(t *testing.T, s store.Store, before snapshot, extraAddrs ...string) {
	t.Helper()
	after := takeSnapshot(t, s, append(slices.Collect(maps.Keys(before.owners)), extraAddrs...)...)
	wantEqual(t, "instances after refused call", after.instances, before.instances)
	wantEqual(t, "documents after refused call", after.documents, before.documents)
	wantEqual(t, "address owners after refused call", after.owners, before.owners)
}

// The tests.

func testCreateGetList(t *testing.T, s store.Store) {
	list, err := s.Instances(t.Context())
	if err != nil {
		t.Fatalf("Instances on an empty store: %v", err)
	}
	if len(list) != 0 {
		t.Fatalf("Instances on an empty store = %v, want none", list)
	}

	var want []store.Instance
	for i, name := range []string{"web-b", "db", "web-a", "Zeta"} {
		in := newInstance(name, uuidOf(i+1), fmt.Sprintf("10.0.0.%d", i+1))
		doc := newDocument(in, "tree of "+name)
		doc.InstanceUUID = "" // filled in by the store
		gotInst, gotDoc, err := s.Put(t.Context(), in, doc, 0)
		if err != nil {
			t.Fatalf("Put(%s): %v", name, err)
		}
		in.Revision = 1
		wantEqual(t, "Put returned record", gotInst, in)
		wantDoc := newDocument(in, "tree of "+name)
		wantDoc.Version = 1
		wantEqual(t, "Put returned document", gotDoc, wantDoc)
		wantEqual(t, "Instance("+name+")", getInstance(t, s, name), in)
		wantEqual(t, "Document("+in.UUID+")", getDocument(t, s, in.UUID), wantDoc)
		wantOwner(t, s, in.Addresses[0], in.UUID)
		want = append(want, in)
	}
	slices.SortFunc(want, func(a, b store.Instance) int {
		return strings.Compare(a.Name, b.Name)
	})
	list, err = s.Instances(t.Context())
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	wantEqual(t, "Instances (sorted by name)", list, want)
}

func testUpdateBumps(t *testing.T, s store.Store) {
	in := newInstance("vm", uuidOf(1), "10.0.0.1")
	var lastRev, lastVersion int64
	for i := 1; i <= 5; i++ {
		in.ProjectID = fmt.Sprintf("project-%d", i)
		gotInst, gotDoc := put(t, s, in, fmt.Sprintf("tree %d", i), lastRev)
		if gotInst.Revision != int64(i) || gotDoc.Version != int64(i) {
			t.Fatalf("put %d: revision %d, version %d; want %d, %d", i, gotInst.Revision, gotDoc.Version, i, i)
		}
		if gotInst.Revision <= lastRev || gotDoc.Version <= lastVersion {
			t.Fatalf("put %d: revision/version did not increase", i)
		}
		lastRev, lastVersion = gotInst.Revision, gotDoc.Version
		wantEqual(t, "Instance after put", getInstance(t, s, "vm"), gotInst)
		wantEqual(t, "Document after put", getDocument(t, s, in.UUID), gotDoc)
		v, err := s.DocumentVersion(t.Context(), in.UUID)
		if err != nil || v != gotDoc.Version {
			t.Fatalf("DocumentVersion = %d, %v; want %d", v, err, gotDoc.Version)
		}
	}
	// Revision and Version in the input are ignored: the store assigns them.
	in.Revision = 100
	doc := newDocument(in, "tree 6")
	doc.Version = 100
	gotInst, gotDoc, err := s.Put(t.Context(), in, doc, -1)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if gotInst.Revision != 6 || gotDoc.Version != 6 {
		t.Fatalf("Put with caller-set revision/version: got %d/%d, want 6/6", gotInst.Revision, gotDoc.Version)
	}
}

func testExpectRevision(t *testing.T, s store.Store) {
	in := newInstance("vm", uuidOf(1), "10.0.0.1")
	put(t, s, in, "tree 1", 0)
	put(t, s, in, "tree 2", 1)
	before := takeSnapshot(t, s)

	changed := in
	changed.Addresses = []string{"10.0.0.2"}
	changed.ProjectID = "other"
	for _, expect := range []int64{0, 1, 3, 100} {
		_, _, err := s.Put(t.Context(), changed, newDocument(changed, "refused"), expect)
		wantErrIs(t, fmt.Sprintf("Put with expectRevision %d at revision 2", expect), err, store.ErrConflict)
		wantUnchanged(t, s, before, "10.0.0.2")
	}

	// Expecting a revision of an instance that does not exist.
	ghost := newInstance("ghost", uuidOf(2))
	_, _, err := s.Put(t.Context(), ghost, newDocument(ghost, "x"), 1)
	wantErrIs(t, "Put of a new instance with expectRevision 1", err, store.ErrConflict)
	_, err = s.Instance(t.Context(), "ghost")
	wantErrIs(t, "Instance(ghost) after refused create", err, store.ErrNotFound)
	wantUnchanged(t, s, before)

	gotInst, gotDoc := put(t, s, changed, "tree 3", 2)
	if gotInst.Revision != 3 || gotDoc.Version != 3 {
		t.Fatalf("Put with the right revision: got %d/%d, want 3/3", gotInst.Revision, gotDoc.Version)
	}
}

func testNameHeld(t *testing.T, s store.Store) {
	a := newInstance("vm", uuidOf(1), "10.0.0.1")
	put(t, s, a, "a", 0)
	before := takeSnapshot(t, s)

	b := newInstance("vm", uuidOf(2), "10.0.0.2")
	for _, expect := range []int64{-1, 0, 1} {
		_, _, err := s.Put(t.Context(), b, newDocument(b, "b"), expect)
		wantErrIs(t, fmt.Sprintf("Put of name vm with another UUID (expect %d)", expect), err, store.ErrConflict)
	}
	_, err := s.Document(t.Context(), b.UUID)
	wantErrIs(t, "Document of refused UUID", err, store.ErrNotFound)
	wantUnchanged(t, s, before, "10.0.0.2")
}

func testUUIDHeld(t *testing.T, s store.Store) {
	a := newInstance("vm-a", uuidOf(1), "10.0.0.1")
	put(t, s, a, "a", 0)
	before := takeSnapshot(t, s)

	b := newInstance("vm-b", uuidOf(1), "10.0.0.2")
	for _, expect := range []int64{-1, 0} {
		_, _, err := s.Put(t.Context(), b, newDocument(b, "b"), expect)
		wantErrIs(t, fmt.Sprintf("Put of UUID %s under another name (expect %d)", b.UUID, expect), err, store.ErrConflict)
	}
	_, err := s.Instance(t.Context(), "vm-b")
	wantErrIs(t, "Instance(vm-b) after refused put", err, store.ErrNotFound)
	wantUnchanged(t, s, before, "10.0.0.2")
}

func testAddressHeld(t *testing.T, s store.Store) {
	a := newInstance("vm-a", uuidOf(1), "10.0.0.1", "2001:db8::1")
	put(t, s, a, "a", 0)
	before := takeSnapshot(t, s)

	// A new instance claiming a free and a held address: refused whole.
	b := newInstance("vm-b", uuidOf(2), "10.0.0.2", "2001:db8::1")
	_, _, err := s.Put(t.Context(), b, newDocument(b, "b"), -1)
	wantErrIs(t, "Put claiming vm-a's address", err, store.ErrConflict)
	_, err = s.Instance(t.Context(), "vm-b")
	wantErrIs(t, "Instance(vm-b) after refused put", err, store.ErrNotFound)
	_, err = s.Document(t.Context(), b.UUID)
	wantErrIs(t, "Document(vm-b) after refused put", err, store.ErrNotFound)
	wantNoOwner(t, s, "10.0.0.2")
	wantUnchanged(t, s, before, "10.0.0.2")

	// An existing instance trying to take another's address: refused, its
	// own record and addresses stay.
	b.Addresses = []string{"10.0.0.2"}
	put(t, s, b, "b", 0)
	before = takeSnapshot(t, s)
	b.Addresses = []string{"10.0.0.3", "10.0.0.1"}
	_, _, err = s.Put(t.Context(), b, newDocument(b, "b2"), 1)
	wantErrIs(t, "update claiming vm-a's address", err, store.ErrConflict)
	wantUnchanged(t, s, before, "10.0.0.3")
	wantOwner(t, s, "10.0.0.2", b.UUID)
	wantOwner(t, s, "10.0.0.1", a.UUID)
	wantNoOwner(t, s, "10.0.0.3")
}

func testAddressesReleased(t *testing.T, s store.Store) {
	a := newInstance("vm-a", uuidOf(1), "10.0.0.1", "10.0.0.2", "2001:db8::1")
	put(t, s, a, "a", 0)

	a.Addresses = []string{"10.0.0.2"}
	put(t, s, a, "a", 1)
	wantOwner(t, s, "10.0.0.2", a.UUID)
	wantNoOwner(t, s, "10.0.0.1")
	wantNoOwner(t, s, "2001:db8::1")

	b := newInstance("vm-b", uuidOf(2), "10.0.0.1", "2001:db8::1")
	put(t, s, b, "b", 0)
	wantOwner(t, s, "10.0.0.1", b.UUID)
	wantOwner(t, s, "2001:db8::1", b.UUID)

	// Dropping every address.
	a.Addresses = nil
	put(t, s, a, "a", 2)
	wantNoOwner(t, s, "10.0.0.2")
	if got := getInstance(t, s, "vm-a"); len(got.Addresses) != 0 {
		t.Fatalf("vm-a addresses = %v, want none", got.Addresses)
	}
}

func testLookupAddress(t *testing.T, s store.Store) {
	in := newInstance("vm", uuidOf(1), "192.0.2.10", "2001:DB8:0:0::10", "::ffff:198.51.100.7", "fe80::1%br0", "192.0.2.10")
	got, _ := put(t, s, in, "t", 0)
	want := []string{"192.0.2.10", "2001:db8::10", "198.51.100.7", "fe80::1%br0"}
	wantEqual(t, "stored addresses (canonical, deduplicated)", got.Addresses, want)
	wantEqual(t, "Instance addresses", getInstance(t, s, "vm").Addresses, want)

	for _, addr := range []string{
		"192.0.2.10", "2001:db8::10", "2001:0db8:0000::0010", "198.51.100.7",
		"::ffff:198.51.100.7", "::ffff:192.0.2.10", "fe80::1%br0",
	} {
		wantOwner(t, s, addr, in.UUID)
	}
	for _, addr := range []string{"192.0.2.11", "2001:db8::11", "fe80::1", "fe80::1%br1", "not-an-address", ""} {
		wantNoOwner(t, s, addr)
	}
}

func testDelete(t *testing.T, s store.Store) {
	a := newInstance("vm-a", uuidOf(1), "10.0.0.1", "2001:db8::1")
	b := newInstance("vm-b", uuidOf(2), "10.0.0.2")
	put(t, s, a, "a", 0)
	put(t, s, a, "a", 1)
	put(t, s, b, "b", 0)
	secret := store.WrappedSecret{KeyID: "kek", Generation: 1, Nonce: []byte{1}, Ciphertext: []byte{2}}
	for _, uuid := range []string{a.UUID, b.UUID} {
		for _, id := range []string{"disk-1", "admin-pass"} {
			if err := s.PutSecret(t.Context(), uuid, id, secret); err != nil {
				t.Fatalf("PutSecret(%s, %s): %v", uuid, id, err)
			}
		}
	}

	if err := s.Delete(t.Context(), "vm-a"); err != nil {
		t.Fatalf("Delete(vm-a): %v", err)
	}
	_, err := s.Instance(t.Context(), "vm-a")
	wantErrIs(t, "Instance after Delete", err, store.ErrNotFound)
	_, err = s.Document(t.Context(), a.UUID)
	wantErrIs(t, "Document after Delete", err, store.ErrNotFound)
	_, err = s.DocumentVersion(t.Context(), a.UUID)
	wantErrIs(t, "DocumentVersion after Delete", err, store.ErrNotFound)
	wantNoOwner(t, s, "10.0.0.1")
	wantNoOwner(t, s, "2001:db8::1")
	for _, id := range []string{"disk-1", "admin-pass"} {
		_, err = s.GetSecret(t.Context(), a.UUID, id)
		wantErrIs(t, "GetSecret after Delete", err, store.ErrNotFound)
		if _, err := s.GetSecret(t.Context(), b.UUID, id); err != nil {
			t.Fatalf("GetSecret of the other instance after Delete: %v", err)
		}
	}
	list, err := s.Instances(t.Context())
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	if len(list) != 1 || list[0].Name != "vm-b" {
		t.Fatalf("Instances after Delete = %+v, want only vm-b", list)
	}
	wantOwner(t, s, "10.0.0.2", b.UUID)

	err = s.Delete(t.Context(), "vm-a")
	wantErrIs(t, "second Delete", err, store.ErrNotFound)
	err = s.Delete(t.Context(), "never-was")
	wantErrIs(t, "Delete of an unknown name", err, store.ErrNotFound)

	// The name, UUID and addresses are free again; counting restarts.
	gotInst, gotDoc := put(t, s, a, "a again", 0)
	if gotInst.Revision != 1 || gotDoc.Version != 1 {
		t.Fatalf("re-create after Delete: revision %d, version %d; want 1, 1", gotInst.Revision, gotDoc.Version)
	}
	wantOwner(t, s, "10.0.0.1", a.UUID)
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.Instance(ctx, "nope")
	wantErrIs(t, "Instance", err, store.ErrNotFound)
	_, err = s.Document(ctx, uuidOf(9))
	wantErrIs(t, "Document", err, store.ErrNotFound)
	_, err = s.DocumentVersion(ctx, uuidOf(9))
	wantErrIs(t, "DocumentVersion", err, store.ErrNotFound)
	_, err = s.LookupAddress(ctx, "10.9.9.9")
	wantErrIs(t, "LookupAddress", err, store.ErrNotFound)
	_, err = s.GetSecret(ctx, uuidOf(9), "x")
	wantErrIs(t, "GetSecret", err, store.ErrNotFound)
	err = s.DeleteSecret(ctx, uuidOf(9), "x")
	wantErrIs(t, "DeleteSecret", err, store.ErrNotFound)
	err = s.Delete(ctx, "nope")
	wantErrIs(t, "Delete", err, store.ErrNotFound)
}

func testInvalidInput(t *testing.T, s store.Store) {
	good := newInstance("vm", uuidOf(1), "10.0.0.1")
	cases := []struct {
		name string
		edit func(*store.Instance, *store.Document)
	}{
		{"empty name", func(i *store.Instance, _ *store.Document) { i.Name = "" }},
		{"empty uuid", func(i *store.Instance, d *store.Document) { i.UUID = ""; d.InstanceUUID = "" }},
		{"uuid with braces", func(i *store.Instance, d *store.Document) { i.UUID = "{x}"; d.InstanceUUID = "" }},
		{"bad address", func(i *store.Instance, _ *store.Document) { i.Addresses = []string{"10.0.0.2", "10.0.0.300"} }},
		{"address with prefix", func(i *store.Instance, _ *store.Document) { i.Addresses = []string{"10.0.0.2/24"} }},
		{"document of another instance", func(_ *store.Instance, d *store.Document) { d.InstanceUUID = uuidOf(2) }},
	}
	for _, tc := range cases {
		in, doc := good, newDocument(good, "t")
		tc.edit(&in, &doc)
		_, _, err := s.Put(t.Context(), in, doc, -1)
		if err == nil {
			t.Fatalf("Put with %s: no error", tc.name)
		}
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Put with %s: error %v should be neither conflict nor not found", tc.name, err)
		}
	}
	list, err := s.Instances(t.Context())
	if err != nil || len(list) != 0 {
		t.Fatalf("Instances after invalid puts = %v, %v; want none", list, err)
	}
	wantNoOwner(t, s, "10.0.0.2")

	if err := s.PutSecret(t.Context(), "", "id", store.WrappedSecret{}); err == nil {
		t.Fatalf("PutSecret with an empty instance UUID: no error")
	}
	if err := s.PutSecret(t.Context(), uuidOf(1), "", store.WrappedSecret{}); err == nil {
		t.Fatalf("PutSecret with an empty id: no error")
	}
}

func testSecrets(t *testing.T, s store.Store) {
	ctx := t.Context()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	sec := store.WrappedSecret{KeyID: "kek-1", Generation: 3, Nonce: all[:12], Ciphertext: all}
	u1, u2 := uuidOf(1), uuidOf(2)
	// The instance need not exist yet.
	if err := s.PutSecret(ctx, u1, "disk-root", sec); err != nil {
		t.Fatalf("PutSecret: %v", err)
	}
	got, err := s.GetSecret(ctx, u1, "disk-root")
	if err != nil {
		t.Fatalf("GetSecret: %v", err)
	}
	wantEqual(t, "GetSecret", got, sec)
	if !bytes.Equal(got.Ciphertext, all) {
		t.Fatalf("ciphertext bytes changed")
	}

	// Scoped per instance and id.
	_, err = s.GetSecret(ctx, u2, "disk-root")
	wantErrIs(t, "GetSecret of another instance", err, store.ErrNotFound)
	_, err = s.GetSecret(ctx, u1, "disk-data")
	wantErrIs(t, "GetSecret of another id", err, store.ErrNotFound)
	other := store.WrappedSecret{KeyID: "kek-2", Generation: 1, Nonce: []byte{0}, Ciphertext: []byte{}}
	if err := s.PutSecret(ctx, u2, "disk-root", other); err != nil {
		t.Fatalf("PutSecret: %v", err)
	}

	// Replace (key rotation rewraps in place).
	rewrapped := store.WrappedSecret{KeyID: "kek-1", Generation: 4, Nonce: []byte("nonce-4....."), Ciphertext: []byte("\x00\xff\x00 new")}
	if err := s.PutSecret(ctx, u1, "disk-root", rewrapped); err != nil {
		t.Fatalf("PutSecret (replace): %v", err)
	}
	got, err = s.GetSecret(ctx, u1, "disk-root")
	if err != nil {
		t.Fatalf("GetSecret: %v", err)
	}
	wantEqual(t, "GetSecret after replace", got, rewrapped)

	if err := s.DeleteSecret(ctx, u1, "disk-root"); err != nil {
		t.Fatalf("DeleteSecret: %v", err)
	}
	_, err = s.GetSecret(ctx, u1, "disk-root")
	wantErrIs(t, "GetSecret after DeleteSecret", err, store.ErrNotFound)
	err = s.DeleteSecret(ctx, u1, "disk-root")
	wantErrIs(t, "second DeleteSecret", err, store.ErrNotFound)
	got, err = s.GetSecret(ctx, u2, "disk-root")
	if err != nil {
		t.Fatalf("GetSecret of the other instance: %v", err)
	}
	if got.KeyID != "kek-2" || got.Generation != 1 || !bytes.Equal(got.Nonce, []byte{0}) || len(got.Ciphertext) != 0 {
		t.Fatalf("other instance's secret = %+v", got)
	}
}

func testConcurrentPuts(t *testing.T, s store.Store) {
	const workers, puts = 8, 50
	in := newInstance("vm", uuidOf(1), "10.0.0.1", "2001:db8::1")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		revs     = map[int64]bool{}
		versions = map[int64]bool{}
		errs     = make(chan error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			var last int64
			for i := range puts {
				gotInst, gotDoc, err := s.Put(t.Context(), in, newDocument(in, fmt.Sprintf("w%d-%d", w, i)), -1)
				if err != nil {
					errs <- fmt.Errorf("worker %d put %d: %w", w, i, err)
					return
				}
				if gotInst.Revision <= last {
					errs <- fmt.Errorf("worker %d: revision went from %d to %d", w, last, gotInst.Revision)
					return
				}
				last = gotInst.Revision
				mu.Lock()
				revs[gotInst.Revision] = true
				versions[gotDoc.Version] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const total = workers * puts
	if got := getInstance(t, s, "vm").Revision; got != 1+(total-1) {
		t.Fatalf("revision after %d puts = %d, want %d", total, got, 1+(total-1))
	}
	if got := getDocument(t, s, in.UUID).Version; got != total {
		t.Fatalf("document version after %d puts = %d, want %d", total, got, total)
	}
	if len(revs) != total || len(versions) != total {
		t.Fatalf("%d distinct revisions and %d distinct versions returned, want %d each", len(revs), len(versions), total)
	}
	wantOwner(t, s, "10.0.0.1", in.UUID)
	wantOwner(t, s, "2001:db8::1", in.UUID)
}

// testConcurrentCAS runs read-modify-write loops with expectRevision: every
// successful Put must be counted exactly once.
func testConcurrentCAS(t *testing.T, s store.Store) {
	const workers, increments = 4, 15
	in := newInstance("counter", uuidOf(1))
	put(t, s, in, "0", 0)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for done := 0; done < increments; {
				cur, err := s.Instance(t.Context(), "counter")
				if err != nil {
					errs <- err
					return
				}
				_, _, err = s.Put(t.Context(), cur, newDocument(cur, fmt.Sprintf("w%d", w)), cur.Revision)
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
	if got, want := getInstance(t, s, "counter").Revision, int64(1+workers*increments); got != want {
		t.Fatalf("revision = %d, want %d", got, want)
	}
}

func testConcurrentAddressClaims(t *testing.T, s store.Store) {
	const claimers = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		errs    = make(chan error, claimers)
	)
	for i := range claimers {
		wg.Go(func() {
			in := newInstance(fmt.Sprintf("vm-%02d", i), uuidOf(i+1), fmt.Sprintf("10.1.0.%d", i+1), "10.0.0.1")
			_, _, err := s.Put(t.Context(), in, newDocument(in, "t"), 0)
			switch {
			case err == nil:
				mu.Lock()
				winners = append(winners, in.UUID)
				mu.Unlock()
			case !errors.Is(err, store.ErrConflict):
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(winners) != 1 {
		t.Fatalf("%d instances claimed the same address, want exactly 1", len(winners))
	}
	wantOwner(t, s, "10.0.0.1", winners[0])
	list, err := s.Instances(t.Context())
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	if len(list) != 1 || list[0].UUID != winners[0] {
		t.Fatalf("Instances = %+v, want only the winner %s", list, winners[0])
	}
	for i := range claimers {
		if uuid := uuidOf(i + 1); uuid != winners[0] {
			wantNoOwner(t, s, fmt.Sprintf("10.1.0.%d", i+1))
		}
	}
}

// testConcurrentAddressChanges has writers replace one instance's
// addresses with their own sets at the same time: afterwards the address
// index must hold exactly the addresses of the final record.
func testConcurrentAddressChanges(t *testing.T, s store.Store) {
	const workers, puts = 6, 20
	in := newInstance("vm", uuidOf(1))
	addrsOf := func(w int) []string {
		return []string{"10.0.0.1", fmt.Sprintf("10.2.%d.1", w), fmt.Sprintf("2001:db8::%d:1", w+1)}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			mine := in
			mine.Addresses = addrsOf(w)
			for i := range puts {
				if _, _, err := s.Put(t.Context(), mine, newDocument(mine, "t"), -1); err != nil {
					errs <- fmt.Errorf("worker %d put %d: %w", w, i, err)
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
	final := getInstance(t, s, "vm")
	if final.Revision != workers*puts {
		t.Fatalf("revision = %d, want %d", final.Revision, workers*puts)
	}
	wantEqual(t, "document addresses", getDocument(t, s, in.UUID).Addresses, final.Addresses)
	for w := range workers {
		for _, a := range addrsOf(w) {
			if slices.Contains(final.Addresses, a) {
				wantOwner(t, s, a, in.UUID)
			} else {
				wantNoOwner(t, s, a)
			}
		}
	}
}

func testLargeDocument(t *testing.T, s store.Store) {
	tree := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(tree)
	in := newInstance("big", uuidOf(1), "10.0.0.1")
	doc := newDocument(in, "")
	doc.Tree = tree
	for i := 1; i <= 2; i++ {
		_, gotDoc, err := s.Put(t.Context(), in, doc, -1)
		if err != nil {
			t.Fatalf("Put of a 1 MiB document: %v", err)
		}
		if !bytes.Equal(gotDoc.Tree, tree) || gotDoc.Version != int64(i) {
			t.Fatalf("Put returned a different document (version %d)", gotDoc.Version)
		}
		got := getDocument(t, s, in.UUID)
		if !bytes.Equal(got.Tree, tree) {
			t.Fatalf("1 MiB tree did not round-trip (got %d bytes)", len(got.Tree))
		}
		v, err := s.DocumentVersion(t.Context(), in.UUID)
		if err != nil || v != int64(i) {
			t.Fatalf("DocumentVersion = %d, %v; want %d", v, err, i)
		}
		tree[0]++
	}
}

func testCanceledContext(t *testing.T, s store.Store) {
	in := newInstance("vm", uuidOf(1), "10.0.0.1")
	put(t, s, in, "t", 0)
	if err := s.PutSecret(t.Context(), in.UUID, "s", store.WrappedSecret{KeyID: "k"}); err != nil {
		t.Fatalf("PutSecret: %v", err)
	}
	before := takeSnapshot(t, s)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	other := newInstance("vm2", uuidOf(2), "10.0.0.2")
	calls := map[string]func() error{
		"Put": func() error {
			_, _, err := s.Put(ctx, other, newDocument(other, "t"), -1)
			return err
		},
		"Put (update)": func() error {
			_, _, err := s.Put(ctx, in, newDocument(in, "changed"), -1)
			return err
		},
		"Instance":        func() error { _, err := s.Instance(ctx, "vm"); return err },
		"Instances":       func() error { _, err := s.Instances(ctx); return err },
		"Delete":          func() error { return s.Delete(ctx, "vm") },
		"Document":        func() error { _, err := s.Document(ctx, in.UUID); return err },
		"DocumentVersion": func() error { _, err := s.DocumentVersion(ctx, in.UUID); return err },
		"LookupAddress":   func() error { _, err := s.LookupAddress(ctx, "10.0.0.1"); return err },
		"PutSecret":       func() error { return s.PutSecret(ctx, in.UUID, "s2", store.WrappedSecret{}) },
		"GetSecret":       func() error { _, err := s.GetSecret(ctx, in.UUID, "s"); return err },
		"DeleteSecret":    func() error { return s.DeleteSecret(ctx, in.UUID, "s") },
		"SetPassword":     func() error { return s.SetPassword(ctx, in.UUID, []byte("pw")) },
		"Password":        func() error { _, err := s.Password(ctx, in.UUID); return err },
		"Ping":            func() error { return s.Ping(ctx) },
		"Watch":           func() error { _, err := s.Watch(ctx); return err },
	}
	for name, call := range calls {
		wantErrIs(t, name+" with a canceled context", call(), context.Canceled)
	}
	wantUnchanged(t, s, before, "10.0.0.2")
	if _, err := s.GetSecret(t.Context(), in.UUID, "s"); err != nil {
		t.Fatalf("secret after canceled DeleteSecret: %v", err)
	}
	_, err := s.GetSecret(t.Context(), in.UUID, "s2")
	wantErrIs(t, "secret after canceled PutSecret", err, store.ErrNotFound)
	_, err = s.Password(t.Context(), in.UUID)
	wantErrIs(t, "password after canceled SetPassword", err, store.ErrNotFound)
}
