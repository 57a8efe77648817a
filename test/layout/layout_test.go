// Package layout checks rules about the shape of the code base: every
// package has exactly one package comment, and the import graph is the
// intended one (go list -deps): the guest agent stays free of host-side
// code and heavy dependencies so it remains a small static binary, the
// metadata server and the config drive never reach back into hostctl or
// libvirt, the store and the schemas stand alone.
package layout

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func TestPackageDocs(t *testing.T) {
	root := moduleRoot(t)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			return nil
		}
		pkgs, err := packageDocs(p)
		if err != nil {
			return err
		}
		for pkgName, withDoc := range pkgs {
			rel, _ := filepath.Rel(root, p)
			switch {
			case len(withDoc) == 0:
				t.Errorf("%s: package %s has no package comment", rel, pkgName)
			case len(withDoc) > 1:
				t.Errorf("%s: package comment in several files: %v", rel, withDoc)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

const module = "github.com/vmeta/vmeta"

// importRule forbids the packages under from (and from itself) to depend,
// directly or not, on any package under one of forbidden, except those
// under one of allowed.
type importRule struct {
	name      string
	from      string
	forbidden []string
	allowed   []string
	direct    bool // only the packages' own imports count
}

// importRules is the intended import graph (../shared DESIGN: data flows one
// way; readers never reach back to the host).
var importRules = []importRule{
	{
		name: "guest stays free of host code, libvirt, Redis and bolt",
		from: module + "/guest",
		forbidden: []string{
			module + "/hostctl",
			module + "/server",
			module + "/internal/store",
			module + "/internal/keys",
			"github.com/digitalocean/go-libvirt",
			"github.com/redis/go-redis",
			"go.etcd.io/bbolt",
		},
	},
	{
		// The agent holds boot (issue 23): every package it links runs
		// its init at start. A JSON Schema library compiles its
		// meta-schemas there (~1 MB, 8.5k allocations, most of the
		// agent's start under TCG); the model, the renderer and the
		// drive writer pull in YAML and more; net/http's client links
		// TLS, HTTP/2 and X.509 (3.7 MB of a 7.7 MB agent). The agent
		// validates with the generated schema/check, reads with
		// configdrive/driveread and internal/metadata/wire, and asks the
		// metadata service with its own small HTTP/1.1 client.
		name: "the agent links no JSON Schema library, model, renderer, drive writer or net/http",
		from: module + "/guest",
		forbidden: []string{
			"github.com/santhosh-tekuri/jsonschema",
			"net/http",
			"crypto/tls",
			"sigs.k8s.io/yaml",
			module + "/schema",
			module + "/internal/model",
			module + "/internal/metadata",
			module + "/configdrive",
		},
		allowed: []string{
			module + "/schema/check",
			module + "/internal/metadata/wire",
			module + "/configdrive/driveread",
		},
	},
	{
		name:      "server never imports hostctl or libvirt",
		from:      module + "/server",
		forbidden: []string{module + "/hostctl", "github.com/digitalocean/go-libvirt"},
	},
	{
		name:      "configdrive never imports hostctl or libvirt",
		from:      module + "/configdrive",
		forbidden: []string{module + "/hostctl", "github.com/digitalocean/go-libvirt"},
	},
	{
		name:      "internal/store imports no other vmeta package (but errkind, for its sentinels' kinds)",
		from:      module + "/internal/store",
		forbidden: []string{module},
		allowed:   []string{module + "/internal/store", module + "/internal/errkind"},
	},
	{
		name:      "internal/errkind imports nothing of vmeta",
		from:      module + "/internal/errkind",
		forbidden: []string{module},
		allowed:   []string{module + "/internal/errkind"},
	},
	{
		name:      "internal/metadata never imports the store",
		from:      module + "/internal/metadata",
		forbidden: []string{module + "/internal/store"},
	},
	{
		name:      "schema imports nothing of vmeta",
		from:      module + "/schema",
		forbidden: []string{module},
		allowed:   []string{module + "/schema"},
	},
	{
		// Directly: server reaches model through internal/metadata,
		// whose renderer takes a model.Instance.
		name:      "server does not import internal/model",
		from:      module + "/server",
		forbidden: []string{module + "/internal/model"},
		direct:    true,
	},
	{
		// Wire types at the edge: clients link the API's bodies and
		// nothing of the host (issue 22 item 5).
		name:      "hostctl/api/types imports nothing of vmeta",
		from:      module + "/hostctl/api/types",
		forbidden: []string{module},
		allowed:   []string{module + "/hostctl/api/types"},
	},
	{
		name: "the Go client links no store, key manager or key rotation",
		from: module + "/hostctl/api/client",
		forbidden: []string{
			module + "/internal/store",
			module + "/internal/keys",
			module + "/hostctl/keyrotation",
			module + "/hostctl/controller",
		},
	},
	{
		// Feature packages own their domain and stored structs; only
		// hostctl/api converts to and from the wire types.
		name:      "hostctl/flavors does not use the wire types",
		from:      module + "/hostctl/flavors",
		forbidden: []string{module + "/hostctl/api"},
	},
	{
		// Feature packages own their domain and stored structs; only
		// hostctl/api converts to and from the wire types.
		name:      "hostctl/images does not use the wire types",
		from:      module + "/hostctl/images",
		forbidden: []string{module + "/hostctl/api"},
	},
	{
		// Feature packages own their domain and stored structs; only
		// hostctl/api converts to and from the wire types.
		name:      "hostctl/devices does not use the wire types",
		from:      module + "/hostctl/devices",
		forbidden: []string{module + "/hostctl/api"},
	},
	{
		// Feature packages own their domain and stored structs; only
		// hostctl/api converts to and from the wire types.
		name:      "hostctl/encryption does not use the wire types",
		from:      module + "/hostctl/encryption",
		forbidden: []string{module + "/hostctl/api"},
	},
	{
		// Feature packages own their domain and stored structs; only
		// hostctl/api converts to and from the wire types.
		name:      "hostctl/keyrotation does not use the wire types",
		from:      module + "/hostctl/keyrotation",
		forbidden: []string{module + "/hostctl/api"},
	},
	{
		// The share service is a part (hostctl/part): it reaches the core
		// through its own narrow interfaces (shares.Instances,
		// shares.LiveCore), the core does not know it (issue 22 item 2).
		name:      "hostctl/shares does not import hostctl/controller",
		from:      module + "/hostctl/shares",
		forbidden: []string{module + "/hostctl/controller"},
	},
	{
		// (hostdir, the share root's directory rules, is a leaf both use.)
		name:      "hostctl/controller does not import hostctl/shares",
		from:      module + "/hostctl/controller",
		forbidden: []string{module + "/hostctl/shares"},
		allowed:   []string{module + "/hostctl/shares/hostdir"},
	},
	{
		// The catalog reaches the core through its own narrow interface
		// (catalog.Core); the core does not know the catalog.
		name:      "hostctl/controller does not import hostctl/catalog",
		from:      module + "/hostctl/controller",
		forbidden: []string{module + "/hostctl/catalog"},
	},
	{
		// The parts reach the core through their own narrow interfaces
		// (passthrough.Core); the core knows them only as hostctl/part
		// values the daemon registers.
		name:      "hostctl/controller does not import the parts",
		from:      module + "/hostctl/controller",
		forbidden: []string{module + "/hostctl/parts"},
	},
	{
		name:      "the parts do not import hostctl/controller",
		from:      module + "/hostctl/parts",
		forbidden: []string{module + "/hostctl/controller"},
	},
	{
		// A package carved out of the core reaches it through a narrow
		// interface of its own (issue 22), and the core does not know it.
		name:      "hostctl/diskrotate does not import the controller",
		from:      module + "/hostctl/diskrotate",
		forbidden: []string{module + "/hostctl/controller"},
	},
	{
		name:      "the controller does not import hostctl/diskrotate",
		from:      module + "/hostctl/controller",
		forbidden: []string{module + "/hostctl/diskrotate"},
	},
	{
		// The layout of an instance (flavor, image, encryption decision)
		// only decides: the core and the operations call it, it knows
		// neither (issue 22).
		name:      "hostctl/layout imports neither the controller nor hostctl/ops",
		from:      module + "/hostctl/layout",
		forbidden: []string{module + "/hostctl/controller", module + "/hostctl/ops"},
	},
	{
		// The operations (shelve, rescue, resize, rebuild, snapshot) are
		// composed over narrow roles of the core (ops.Frame, Disks, ...); the daemon wires them.
		name:      "the controller does not import hostctl/ops",
		from:      module + "/hostctl/controller",
		forbidden: []string{module + "/hostctl/ops"},
	},
	{
		// The host registry answers with its own statuses; hostctl/api
		// converts (issue 22 item 5).
		name:      "hostctl/hosts does not use the wire types",
		from:      module + "/hostctl/hosts",
		forbidden: []string{module + "/hostctl/api"},
	},
	{
		// How an instance is shown (its state) is shared by the core's
		// list and the metrics, which the daemon hands it: it knows
		// neither the core nor the metrics.
		name:      "hostctl/view imports neither the controller nor hostctl/metrics",
		from:      module + "/hostctl/view",
		forbidden: []string{module + "/hostctl/controller", module + "/hostctl/metrics", module + "/hostctl/daemon"},
	},
}

// under reports whether package p is pkg or below it.
func under(p, pkg string) bool {
	return p == pkg || strings.HasPrefix(p, pkg+"/")
}

func underAny(p string, pkgs []string) bool {
	for _, pkg := range pkgs {
		if under(p, pkg) {
			return true
		}
	}
	return false
}

// listedPackage is what the rules need of "go list -json".
type listedPackage struct {
	ImportPath string
	Imports    []string
}

// importGraph returns every package the module's packages depend on (and
// they themselves), with its direct imports, from "go list -deps -json".
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports", "./...")
	cmd.Dir = moduleRoot(t)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -json ./...: %v", err)
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		graph[p.ImportPath] = p.Imports
	}
	return graph
}

// forbiddenPaths returns, for each package under r.from, the shortest import
// chain to a package r forbids (nil when it has none).
func forbiddenPaths(graph map[string][]string, r importRule) []string {
	var roots []string
	for p := range graph {
		if under(p, r.from) {
			roots = append(roots, p)
		}
	}
	sort.Strings(roots)
	bad := func(p string) bool { return underAny(p, r.forbidden) && !underAny(p, r.allowed) }
	var out []string
	for _, root := range roots {
		// breadth first, so the chain shown is a shortest one
		prev := map[string]string{root: ""}
		queue := []string{root}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			if bad(p) {
				chain := []string{p}
				for q := prev[p]; q != ""; q = prev[q] {
					chain = append([]string{q}, chain...)
				}
				out = append(out, strings.Join(chain, " -> "))
				break
			}
			if r.direct && p != root {
				continue
			}
			for _, imp := range graph[p] {
				if _, seen := prev[imp]; !seen {
					prev[imp] = p
					queue = append(queue, imp)
				}
			}
		}
	}
	return out
}

// TestImportGraph checks the intended import graph with "go list -deps".
func TestImportGraph(t *testing.T) {
	graph := importGraph(t)
	for _, r := range importRules {
		t.Run(r.name, func(t *testing.T) {
			found := false
			for p := range graph {
				found = found || under(p, r.from)
			}
			if !found {
				t.Fatalf("go list shows no package under %s", r.from)
			}
			paths := forbiddenPaths(graph, r)
			for _, p := range paths {
				t.Errorf("%s", p)
			}
		})
	}
}

// TestForbiddenPaths checks the rule checker on a small graph.
func TestForbiddenPaths(t *testing.T) {
	graph := map[string][]string{
		"m/a":     {"m/a/sub", "fmt"},
		"m/a/sub": {"m/b"},
		"m/b":     {"m/c"},
		"m/c":     nil,
		"fmt":     nil,
	}
	tests := []struct {
		rule importRule
		want []string
	}{
		{importRule{from: "m/a", forbidden: []string{"m/c"}}, []string{"m/a -> m/a/sub -> m/b -> m/c", "m/a/sub -> m/b -> m/c"}},
		{importRule{from: "m/a", forbidden: []string{"m"}, allowed: []string{"m/a"}}, []string{"m/a -> m/a/sub -> m/b", "m/a/sub -> m/b"}},
		{importRule{from: "m/b", forbidden: []string{"m/a"}}, nil},
		{importRule{from: "m/a", forbidden: []string{"m/b"}, direct: true}, []string{"m/a/sub -> m/b"}},
	}
	for _, tt := range tests {
		if got := forbiddenPaths(graph, tt.rule); !slices.Equal(got, tt.want) {
			t.Errorf("forbiddenPaths(%v) = %q, want %q", tt.rule, got, tt.want)
		}
	}
}

// packageDocs parses the package clauses of the non-test Go files in dir
// and returns, per package name, the files that carry a package comment.
// (parser.ParseDir, deprecated, did this.)
func packageDocs(dir string) (map[string][]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	out := map[string][]string{}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			return nil, err
		}
		pkg := f.Name.Name
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		if f.Doc != nil {
			out[pkg] = append(out[pkg], name)
		}
	}
	return out, nil
}
