package server

import (
	"bytes"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// newView builds the view of the i-th memory-benchmark instance.
func newView(t testing.TB, i int) *view {
	t.Helper()
	in, _ := memInstance(t, i)
	tr, err := metadata.Render(in, metadata.Options{Rand: deterministicRand(byte(i))})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := tr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	v, err := buildView(store.Document{InstanceUUID: in.UUID, ProjectID: in.ProjectID, Version: 1, Tree: enc}, TokenOptional)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func built(v *view) (n int) {
	for i := range v.dirs {
		if v.dirs[i].Load() != nil {
			n++
		}
	}
	return n
}

// TestViewLazy: a version's directory is built on its first request only;
// versions with the same files share theirs; once every directory is
// built, the files are dropped.
func TestViewLazy(t *testing.T) {
	v := newView(t, 1)
	if n := built(v); n != 0 {
		t.Fatalf("%d directories built before any request", n)
	}
	sharing := func(i uint8) (n int) { // versions sharing the directory of version index i
		for j := range numVersions {
			if v.reps[j] == v.reps[i] {
				n++
			}
		}
		return n
	}
	if _, ok := v.lookup(true, "latest/meta_data.json"); !ok {
		t.Fatal("latest/meta_data.json not found")
	}
	// "latest" and the newest OpenStack version have the same files.
	osLatest := osIndex["latest"]
	if n := built(v); n != sharing(osLatest) || n < 2 || v.dirs[osLatest].Load() != v.dirs[osIndex[metadata.OpenStackLatest]].Load() {
		t.Errorf("after one OpenStack request: %d directories built, want latest and %s (one directory)", n, metadata.OpenStackLatest)
	}
	if _, ok := v.lookup(false, metadata.EC2Latest+"/meta-data/hostname"); !ok {
		t.Fatal("EC2 hostname not found")
	}
	ec2Latest := ec2Index["latest"]
	if n := built(v); n != sharing(osLatest)+sharing(ec2Latest) || v.dirs[ec2Latest].Load() != v.dirs[ec2Index[metadata.EC2Latest]].Load() {
		t.Errorf("after one EC2 request: %d directories built, want %d", n, sharing(osLatest)+sharing(ec2Latest))
	}
	// An unknown version or path builds nothing.
	for _, p := range []string{"2010-01-01/meta-data/hostname", "1.0/no-such-key"} {
		if _, ok := v.lookup(false, p); ok {
			t.Errorf("%s found", p)
		}
	}
	if _, ok := v.lookup(true, "1999-01-01/meta_data.json"); ok {
		t.Error("unknown OpenStack version found")
	}
	if n, want := built(v), sharing(osLatest)+sharing(ec2Latest)+sharing(ec2Index["1.0"]); n != want {
		t.Errorf("%d directories built, want %d (1.0 by its unknown key)", n, want)
	}
	// Bodies equal across versions are kept once: user data is in every
	// version of both trees.
	ud, _ := v.lookup(true, "2012-08-10/user_data")
	ec2ud, _ := v.lookup(false, "1.0/user-data")
	if !bytes.Equal(ud.body, ec2ud.body) || &ud.body[0] != &ec2ud.body[0] {
		t.Error("user data is kept twice")
	}
	if v.tree == nil {
		t.Error("files dropped before every directory is built")
	}
	v.paths()
	if n := built(v); n != numVersions {
		t.Errorf("after paths: %d directories built, want %d", n, numVersions)
	}
	if v.tree != nil {
		t.Error("files kept after every directory is built")
	}
}

// TestViewConcurrentBuild: requests racing for the directories of a fresh
// view (run with -race) all get what a view built in sequence serves.
func TestViewConcurrentBuild(t *testing.T) {
	ref := newView(t, 3)
	paths := ref.paths()
	want := map[string]entry{}
	for _, p := range paths {
		top, rest, _ := strings.Cut(p, "/")
		e, ok := ref.lookup(top == "openstack", rest)
		if !ok {
			t.Fatalf("%s not found", p)
		}
		want[p] = e
	}
	for round := range 20 {
		v := newView(t, 3)
		var wg sync.WaitGroup
		for g := range 8 {
			order := rand.New(rand.NewPCG(uint64(round), uint64(g))).Perm(len(paths))
			wg.Go(func() {
				for _, k := range order {
					p := paths[k]
					top, rest, _ := strings.Cut(p, "/")
					e, ok := v.lookup(top == "openstack", rest)
					w := want[p]
					if !ok || !bytes.Equal(e.body, w.body) || e.json != w.json || e.class != w.class || e.password != w.password {
						t.Errorf("round %d: %s = %+v, %v; want %+v", round, p, e, ok, w)
						return
					}
				}
			})
		}
		wg.Wait()
		if v.tree != nil {
			t.Errorf("round %d: files kept after every directory is built", round)
		}
	}
}

// TestShapesShared: the views the cache holds share their directories'
// shapes when their instances are alike, through the cache's shape table,
// which counts the references; a shape leaves the table with the last
// view that used it.
func TestShapesShared(t *testing.T) {
	docs := newFakeDocs()
	s := New(docs, Options{})
	table := &s.cache.shapes
	publish := func(i int, edit func(*metadata.Tree)) (uuid, addr string) {
		in, addr := memInstance(t, i)
		tr, err := metadata.Render(in, metadata.Options{Rand: deterministicRand(byte(i))})
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(tr)
		}
		docs.publishTree(t, in, tr)
		return in.UUID, addr
	}
	read := func(addr string, paths ...string) {
		for _, p := range paths {
			serveOnce(t, s, p, addr)
		}
	}
	osLatest, ec2Latest := osIndex["latest"], ec2Index["latest"]
	uuidA, addrA := publish(10, nil)
	uuidB, addrB := publish(11, nil)
	for _, addr := range []string{addrA, addrB} {
		read(addr, "/openstack/latest/meta_data.json", "/latest/meta-data/hostname")
	}
	a, b := s.cache.byUUID(uuidA), s.cache.byUUID(uuidB)
	if a == nil || b == nil {
		t.Fatal("views not cached")
	}
	for _, i := range []uint8{osLatest, ec2Latest} {
		sa, sb := a.dirs[i].Load().shape, b.dirs[i].Load().shape
		if sa != sb {
			t.Errorf("version index %d: instances alike have different shapes", i)
		}
		if n := table.refs(sa); n != 2 {
			t.Errorf("version index %d: shape has %d references, want 2 (one per view)", i, n)
		}
	}
	if n, refs := table.stats(); n != 2 || refs != 4 {
		t.Errorf("table: %d shapes, %d references; want 2 (OpenStack and EC2), 4", n, refs)
	}

	// A private shape: a key of its own in the EC2 tree.
	uuidC, addrC := publish(12, func(tr *metadata.Tree) {
		tr.Files["ec2/1.0/meta-data.json"] = []byte(`{"x-private-key-of-TestShapesShared": "1"}`)
	})
	if r := do(s, http.MethodGet, "/1.0/meta-data/x-private-key-of-TestShapesShared", addrC); r.status != 200 || r.body != "1" {
		t.Fatalf("private key: %d %q", r.status, r.body)
	}
	c := s.cache.byUUID(uuidC)
	private := c.dirs[ec2Index["1.0"]].Load().shape
	if n := table.refs(private); n != 1 {
		t.Errorf("private shape: %d references, want 1", n)
	}
	if n, refs := table.stats(); n != 3 || refs != 5 {
		t.Errorf("table after a new shape: %d shapes, %d references; want 3, 5", n, refs)
	}

	// Dropping a view gives its references back: its private shape goes,
	// the shared ones stay for the views still cached.
	s.Invalidate(uuidC)
	if n, refs := table.stats(); n != 2 || refs != 4 {
		t.Errorf("table once the view is dropped: %d shapes, %d references; want 2, 4", n, refs)
	}
	if table.refs(private) != 0 {
		t.Error("private shape still in the table once its view is dropped")
	}
	// A dropped view still answers the requests that hold it, with shapes
	// of its own: the table does not grow.
	if e, ok := c.lookup(false, "2009-04-04/meta-data/hostname"); !ok || len(e.body) == 0 {
		t.Errorf("dropped view: hostname %q %v", e.body, ok)
	}
	if n, refs := table.stats(); n != 2 || refs != 4 {
		t.Errorf("table after a dropped view built a directory: %d shapes, %d references; want 2, 4", n, refs)
	}
	s.Invalidate(uuidA)
	if n := table.refs(b.dirs[osLatest].Load().shape); n != 1 {
		t.Errorf("shared shape: %d references once one of its two views is dropped, want 1", n)
	}
	s.Invalidate(uuidB)
	if n, refs := table.stats(); n != 0 || refs != 0 {
		t.Errorf("table once every view is dropped: %d shapes, %d references; want 0, 0", n, refs)
	}
}

// TestEC2DecodedLate: an EC2 meta-data.json that passes the check at
// fill time but does not decode (a number out of float64's range) is
// found when its version is built: that version answers 500 (logged),
// the others are served.
func TestEC2DecodedLate(t *testing.T) {
	docs := newFakeDocs()
	tr := docs.publish(t, richInstance(t))
	tr.Files["ec2/1.0/meta-data.json"] = []byte(`{"x": 1e999}`)
	storeTree(t, docs, tr)
	var logs testenv.SyncBuffer
	s := New(docs, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if r := get(s, "/1.0/meta-data/x"); r.status != 500 {
		t.Errorf("/1.0/meta-data/x: %d %q", r.status, r.body)
	}
	if !strings.Contains(logs.String(), "metadata document cannot be served") {
		t.Errorf("500 not logged: %q", logs.String())
	}
	for _, p := range []string{"/latest/meta-data/hostname", "/openstack/latest/meta_data.json"} {
		if r := get(s, p); r.status != 200 {
			t.Errorf("%s: %d", p, r.status)
		}
	}
}

// TestVdirOneAllocation (issue 23 item 3): a directory and its spans are
// one allocation up to 64 spans, so that a request's read of its body's
// span is next to the directory it read just before.
func TestVdirOneAllocation(t *testing.T) {
	for _, n := range []int{0, 1, 16, 17, 32, 33, 64} {
		var d *vdir
		if a := testing.AllocsPerRun(10, func() { d = newVdir(nil, n) }); a != 1 {
			t.Errorf("newVdir(%d spans): %v allocations, want 1", n, a)
		}
		if len(d.spans) != n || cap(d.spans) != n {
			t.Errorf("newVdir(%d spans): len %d cap %d", n, len(d.spans), cap(d.spans))
		}
	}
	if d := newVdir(nil, 65); len(d.spans) != 65 {
		t.Errorf("newVdir(65 spans): len %d", len(d.spans))
	}
}
