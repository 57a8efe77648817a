package server

import (
	"bytes"
	"compress/flate"
	"github.com/vmeta/vmeta/internal/testenv"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/store"
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
			if v.src.rep(j) == v.src.rep(int(i)) {
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
	if v.src.data == nil {
		t.Error("files dropped before every directory is built")
	}
	v.paths()
	if n := built(v); n != numVersions {
		t.Errorf("after paths: %d directories built, want %d", n, numVersions)
	}
	if v.src.data != nil {
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
		if v.src.data != nil {
			t.Errorf("round %d: files kept after every directory is built", round)
		}
	}
}

// TestShapesShared: instances alike share their directories' shapes, and
// a shape goes once no view uses it.
func TestShapesShared(t *testing.T) {
	shapeCount := func() int {
		shapes.Lock()
		defer shapes.Unlock()
		return len(shapes.m)
	}
	a, b := newView(t, 10), newView(t, 11)
	for _, v := range []*view{a, b} {
		v.lookup(true, "latest/meta_data.json")
		v.lookup(false, "latest/meta-data/hostname")
	}
	for _, i := range []uint8{osIndex["latest"], ec2Index["latest"]} {
		if a.dirs[i].Load().shape != b.dirs[i].Load().shape {
			t.Errorf("version index %d: instances alike have different shapes", i)
		}
	}
	// A private shape: a key of its own in the EC2 tree.
	in, _ := memInstance(t, 12)
	tr, err := metadata.Render(in, metadata.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr.Files["ec2/1.0/meta-data.json"] = []byte(`{"x-private-key-of-TestShapesShared": "1"}`)
	enc, _ := tr.Encode()
	c, err := buildView(store.Document{InstanceUUID: in.UUID, Tree: enc}, TokenOptional)
	if err != nil {
		t.Fatal(err)
	}
	before := shapeCount()
	if e, ok := c.lookup(false, "1.0/meta-data/x-private-key-of-TestShapesShared"); !ok || string(e.body) != "1" {
		t.Fatalf("private key: %q %v", e.body, ok)
	}
	if got := shapeCount(); got != before+1 {
		t.Fatalf("%d shapes after a new one, want %d", got, before+1)
	}
	runtime.KeepAlive(c)
	c = nil
	deadline := time.Now().Add(10 * time.Second)
	for shapeCount() != before {
		if time.Now().After(deadline) {
			t.Fatalf("%d shapes once the view is gone, want %d", shapeCount(), before)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
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

// TestDeflateDict: the dictionary instance renders, and the dictionary
// pays (the rich instance's files deflate to much less without their
// shared structure).
func TestDeflateDict(t *testing.T) {
	if err := dictInstance().Validate(); err != nil {
		t.Fatalf("dictInstance: %v", err)
	}
	dict := deflateDict()
	if len(dict) < 4<<10 {
		t.Fatalf("dictionary of %d bytes", len(dict))
	}
	v := newView(t, 5)
	files, err := v.src.files()
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	for _, f := range files {
		raw = append(raw, f...)
	}
	with := len(deflate(nil, raw))
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, deflateLevel)
	w.Write(raw)
	w.Close()
	t.Logf("%d distinct files, %d bytes: deflated %d, with the dictionary %d", len(files), len(raw), buf.Len(), with)
	if with >= buf.Len()*3/4 {
		t.Errorf("deflated with the dictionary: %d bytes, without: %d", with, buf.Len())
	}
}
