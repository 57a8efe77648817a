package server

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/metadata"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden-http")

const goldenDir = "testdata/golden-http"

// TestGoldenHTTP fetches every path the server serves for the rich
// instance (every file and listing of every version, "/" and
// "/openstack"), rendered with deterministic randomness, and compares each
// answer (status, Content-Type, body) with testdata/golden-http/<path>.http.
// Run with -update to rewrite the files (and remove those of paths no
// longer served).
func TestGoldenHTTP(t *testing.T) {
	docs := newFakeDocs()
	in := richInstance(t)
	tr, err := metadata.Render(in, metadata.Options{Rand: deterministicRand(42)})
	if err != nil {
		t.Fatal(err)
	}
	docs.publishTree(t, in, tr)
	s := New(docs, testOptions(at("2026-01-01")))
	if r := get(s, "/openstack"); r.status != 200 {
		t.Fatalf("/openstack: %d", r.status)
	}
	v := s.cache.byUUID(richUUID)
	if v == nil {
		t.Fatal("view not cached")
	}
	paths := append([]string{"ec2", "openstack"}, v.paths()...)
	want := map[string]bool{}
	for _, p := range paths {
		r := get(s, "/"+p)
		if r.status != 200 {
			t.Errorf("/%s: %d", p, r.status)
		}
		got := fmt.Sprintf("GET /%s\nstatus: %d\ncontent-type: %s\n\n%s", p, r.status, r.ctype, r.body)
		file := filepath.Join(goldenDir, filepath.FromSlash(p)+".http")
		want[file] = true
		if *update {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v (run go test -update)", p, err)
			continue
		}
		if string(b) != got {
			t.Errorf("/%s differs from %s:\n--- got\n%s\n--- want\n%s", p, file, got, b)
		}
	}
	// No golden file of a path no longer served.
	err = filepath.WalkDir(goldenDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !want[p] {
			if *update {
				return os.Remove(p)
			}
			t.Errorf("%s: golden file of a path not served (run go test -update)", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d paths", len(paths))
}

// TestListingsResolve: every entry of every listing is itself served (a
// directory as a listing, "0=name" as its index), and every served path
// but the roots is listed by its parent.
func TestListingsResolve(t *testing.T) {
	s, _, _ := setup(t, "2026-01-01")
	get(s, "/openstack")
	v := s.cache.byUUID(richUUID)
	served := map[string]entry{}
	for _, p := range v.paths() {
		tree, rest, _ := strings.Cut(p, "/")
		e, ok := v.lookup(tree == "openstack", rest)
		if !ok {
			t.Fatalf("%s: listed by paths but not found", p)
		}
		served[p] = e
	}
	listed := map[string]bool{}
	for p, e := range served {
		if e.class != classListing {
			continue
		}
		for _, line := range strings.Split(string(e.body), "\n") {
			child := strings.TrimSuffix(line, "/")
			if i := strings.IndexByte(child, '='); i >= 0 {
				child = child[:i]
			}
			cp := p + "/" + child
			listed[cp] = true
			ce, ok := served[cp]
			if !ok {
				t.Errorf("%s lists %q, which is not served", p, line)
				continue
			}
			if isDir := strings.HasSuffix(line, "/") || strings.Contains(line, "="); isDir != (ce.class == classListing) {
				t.Errorf("%s lists %q: listing %v, served as class %s", p, line, isDir, ce.class)
			}
		}
	}
	for p := range served {
		dir := p[:strings.LastIndexByte(p, '/')]
		if dir == "ec2" || dir == "openstack" {
			continue // the version lists ("/", "/openstack") are not views
		}
		if !listed[p] && !strings.HasSuffix(p, "/network_data.json") {
			t.Errorf("%s is served but not listed", p)
		}
	}
}
