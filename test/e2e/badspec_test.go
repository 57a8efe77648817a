package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// stateSnapshot is everything a refused spec must leave unchanged.
type stateSnapshot struct {
	list, show string
	// metadata is web-1's meta_data.json without random_seed.
	metadata map[string]any
	// files maps every path under the data directory to a digest of its
	// content ("dir" for directories); the store file is only listed.
	files map[string]string
}

func takeSnapshot(t *testing.T, d *daemon) stateSnapshot {
	t.Helper()
	s := stateSnapshot{
		list:  d.MustCtl("instance", "list", "--output", "json").stdout,
		show:  d.MustCtl("instance", "show", "web-1", "--output", "json").stdout,
		files: map[string]string{},
	}
	decodeJSON(t, string(mustGet(t, d.URL()+"/openstack/latest/meta_data.json")), &s.metadata)
	delete(s.metadata, "random_seed")
	err := filepath.WalkDir(d.DataDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(d.DataDir, p)
		switch {
		case e.IsDir():
			s.files[rel] = "dir"
		case rel == "vmeta.db":
			s.files[rel] = "store"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			s.files[rel] = hex.EncodeToString(sum[:])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk data dir: %v", err)
	}
	return s
}

// compare reports every difference between two snapshots.
func (s stateSnapshot) compare(t *testing.T, after stateSnapshot) {
	t.Helper()
	if after.list != s.list {
		t.Errorf("instance list changed:\n%s\nbefore:\n%s", after.list, s.list)
	}
	if after.show != s.show {
		t.Errorf("instance show web-1 changed:\n%s\nbefore:\n%s", after.show, s.show)
	}
	if !reflect.DeepEqual(after.metadata, s.metadata) {
		a, _ := json.Marshal(after.metadata)
		b, _ := json.Marshal(s.metadata)
		t.Errorf("published meta_data.json (without random_seed) changed:\n%s\nbefore:\n%s", a, b)
	}
	var diffs []string
	for p, v := range after.files {
		switch old, ok := s.files[p]; {
		case !ok:
			diffs = append(diffs, "new: "+p)
		case old != v:
			diffs = append(diffs, "changed: "+p)
		}
	}
	for p := range s.files {
		if _, ok := after.files[p]; !ok {
			diffs = append(diffs, "removed: "+p)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("data directory changed (no new entries, temp files or replaced drives allowed):\n  %s", strings.Join(diffs, "\n  "))
	}
}

// Document edits for the cases below. Paths are dotted, with list indexes
// ("disks.1.tag").
func set(path string, v any) func(map[string]any) {
	return func(m map[string]any) { setPath(m, strings.Split(path, "."), v) }
}

func appendTo(path string, v any) func(map[string]any) {
	return func(m map[string]any) {
		keys := strings.Split(path, ".")
		cur := getPath(m, keys)
		l, _ := cur.([]any)
		setPath(m, keys, append(l, v))
	}
}

func getPath(cur any, keys []string) any {
	for _, k := range keys {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[k]
		case []any:
			i, _ := strconv.Atoi(k)
			cur = c[i]
		}
	}
	return cur
}

func setPath(m map[string]any, keys []string, v any) {
	parent := getPath(m, keys[:len(keys)-1])
	last := keys[len(keys)-1]
	switch p := parent.(type) {
	case map[string]any:
		p[last] = v
	case []any:
		i, _ := strconv.Atoi(last)
		p[i] = v
	default:
		panic("setPath: no container at " + strings.Join(keys, "."))
	}
}

func TestBadSpecsChangeNothing(t *testing.T) {
	t.Parallel()
	const (
		uuid1 = "6e5d4c3b-2a19-4f08-9e7d-6c5b4a392817"
		uuid2 = "2b3c4d5e-6f70-4182-93a4-b5c6d7e8f901"
	)
	spec := webSpec(uuid1)
	d := startDaemon(t, daemonOptions{})
	d.Apply(spec)

	// Each case breaks the valid web-1 spec. Field errors are tried twice:
	// as an update of web-1, and as a new instance web-2 (its own uuid and
	// address 127.0.0.2). want lists what stderr must contain: the field
	// and, where there is one, the value (as hostctl quotes it).
	long61 := strings.Repeat("t", 61)
	long37 := strings.Repeat("s", 37)
	cases := []struct {
		name string
		raw  string // a whole document instead of an edit
		edit []func(map[string]any)
		// conflict cases are not run as web-2.
		only string
		want []string
		// notWant must not appear on stderr.
		notWant []string
	}{
		{name: "malformed YAML", raw: "name: web-1\nuuid: " + uuid1 + "\ndisks:\n  - name: vda\n   bus: virtio\n", want: []string{"(document)", "YAML"}},
		{name: "malformed JSON", raw: `{"name": "web-1", "uuid": "` + uuid1 + `", "disks": [{"name": "vda",}`, want: []string{"(document)", "JSON"}},
		{name: "unknown top-level field", edit: fns(set("colour", "blue")), want: []string{"colour"}},
		{name: "unknown field in disks[0]", edit: fns(set("disks.0.bogus", 1)), want: []string{"disks[0]", "bogus"}},
		{name: "duplicate disk tags", edit: fns(set("disks.2.tag", "squidcache")), want: []string{"disks[2].tag", `"squidcache"`}},
		{name: "duplicate NIC tags", edit: fns(set("nics.1.tag", "nfvfunc1")), want: []string{"nics[1].tag", `"nfvfunc1"`}},
		{name: "tag with slash", edit: fns(set("disks.1.tag", "squid/cache")), want: []string{"disks[1].tag", `"squid/cache"`}},
		{name: "tag of 61 characters", edit: fns(set("nics.0.tag", long61)), want: []string{"nics[0].tag", `"` + long61 + `"`}},
		{name: "tag with newline", edit: fns(set("disks.1.tag", "squid\ncache")), want: []string{"disks[1].tag", `"squid\ncache"`},
			// A raw newline would let a tag forge log and error lines.
			notWant: []string{"squid\ncache"}},
		{name: "virtio disk with SCSI address", edit: fns(set("disks.0.address", "0:0:0:1")), want: []string{"disks[0].address", `"0:0:0:1"`}},
		{name: "scsi disk with PCI address", edit: fns(set("disks.2.address", "0000:00:05.0")), want: []string{"disks[2].address", `"0000:00:05.0"`}},
		{name: "ide disk address out of range", edit: fns(appendTo("disks", map[string]any{"name": "hdc", "bus": "ide", "address": "2:0"})), want: []string{"disks[5].address", `"2:0"`}},
		{name: "bad MAC", edit: fns(set("nics.0.mac", "52:54:00:12:34")), want: []string{"nics[0].mac", `"52:54:00:12:34"`}},
		{name: "share tag of 37 characters", edit: fns(set("shares", []any{map[string]any{"share_id": "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9", "tag": long37}})), want: []string{"shares[0].tag", `"` + long37 + `"`}},
		{name: "address held by another instance", only: "web-2", edit: fns(set("name", "web-2"), set("uuid", uuid2)), want: []string{"address", "127.0.0.1", "web-1"}},
		{name: "same name, different uuid", only: "web-1", edit: fns(set("uuid", uuid2)), want: []string{"uuid", uuid2}},
		{name: "uuid held by another instance", only: "web-2", edit: fns(set("name", "web-2"), set("addresses", []any{"127.0.0.2"})), want: []string{"uuid", uuid1}},
	}

	for _, c := range cases {
		variants := []string{"web-1", "web-2"}
		switch {
		case c.raw != "":
			variants = []string{""}
		case c.only != "":
			variants = []string{c.only}
		}
		for _, v := range variants {
			name := c.name
			if v != "" && c.only == "" {
				name += "/as " + v
			}
			t.Run(name, func(t *testing.T) {
				// Compared with the state just before this case, so that
				// one case's leftovers are reported once, by that case.
				before := takeSnapshot(t, d)
				doc := c.raw
				if doc == "" {
					m := specMap(t, spec)
					if v == "web-2" && c.only == "" {
						m["name"], m["uuid"], m["addresses"] = "web-2", uuid2, []any{"127.0.0.2"}
					}
					for _, e := range c.edit {
						e(m)
					}
					b, err := yaml.Marshal(m)
					if err != nil {
						t.Fatal(err)
					}
					doc = string(b)
				}
				r := d.Ctl("instance", "apply", "-f", writeSpec(t, doc))
				if r.code == 0 {
					t.Errorf("apply succeeded, want a refusal\nspec:\n%s\n%s", doc, r)
				}
				for _, w := range c.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("stderr does not contain %q:\n%s", w, r.stderr)
					}
				}
				for _, w := range c.notWant {
					if strings.Contains(r.stderr, w) {
						t.Errorf("stderr contains %q:\n%s", w, r.stderr)
					}
				}
				before.compare(t, takeSnapshot(t, d))
				if r := getFrom(t, "127.0.0.2", d.URL()+"/openstack/latest/meta_data.json"); r.status != http.StatusNotFound {
					t.Errorf("GET from 127.0.0.2: status %d, want 404 (nothing was published for it)", r.status)
				}
			})
		}
	}

	// The same tag on a disk and a NIC is fine: tags are unique per device
	// type (Nova's rule), and the guest tells them apart by type.
	t.Run("same tag on a disk and a NIC is accepted", func(t *testing.T) {
		m := specMap(t, spec)
		set("disks.1.tag", "nfvfunc1")(m)
		b, err := yaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		r := d.Ctl("instance", "apply", "-f", writeSpec(t, string(b)), "--output", "json")
		if r.code != 0 {
			t.Fatalf("apply refused a disk and a NIC sharing a tag: %s", r)
		}
		var inst instanceJSON
		decodeJSON(t, r.stdout, &inst)
		if inst.Revision != 2 || inst.DocumentVersion != 2 {
			t.Errorf("revision %d, metadata version %d; want 2 and 2", inst.Revision, inst.DocumentVersion)
		}
		s2 := parseTestSpec(t, string(b))
		checkLatestMetaData(t, "meta_data.json", mustGet(t, d.URL()+"/openstack/latest/meta_data.json"), s2)
	})
}

func fns(f ...func(map[string]any)) []func(map[string]any) { return f }
