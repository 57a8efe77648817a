package ops

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// maxRoleMethods is the most methods an interface of this package may
// have (issue 22: narrow interfaces defined where used, none over ~8
// methods; no composite of everything the core does).
const maxRoleMethods = 8

// TestRolesAreNarrow: every interface declared in this package (the
// roles the operations need of the core) has at most maxRoleMethods
// methods, counting those of the interfaces it embeds.
func TestRolesAreNarrow(t *testing.T) {
	fset := token.NewFileSet()
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	ifaces := map[string]*ast.InterfaceType{}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(node ast.Node) bool {
			if ts, ok := node.(*ast.TypeSpec); ok {
				if it, ok := ts.Type.(*ast.InterfaceType); ok {
					ifaces[ts.Name.Name] = it
				}
			}
			return true
		})
	}
	if len(ifaces) == 0 {
		t.Fatal("no interface found in package ops: the test reads the wrong directory")
	}
	var count func(name string, it *ast.InterfaceType, seen map[string]bool) int
	count = func(name string, it *ast.InterfaceType, seen map[string]bool) int {
		n := 0
		for _, f := range it.Methods.List {
			if len(f.Names) > 0 {
				n += len(f.Names)
				continue
			}
			id, ok := f.Type.(*ast.Ident)
			if !ok || ifaces[id.Name] == nil || seen[id.Name] {
				t.Errorf("interface %s embeds %s: embed only this package's roles (a foreign interface hides its width)", name, exprString(f.Type))
				continue
			}
			seen[id.Name] = true
			n += count(id.Name, ifaces[id.Name], seen)
		}
		return n
	}
	for name, it := range ifaces {
		n := count(name, it, map[string]bool{name: true})
		t.Logf("%s: %d methods", name, n)
		if n > maxRoleMethods {
			t.Errorf("interface %s has %d methods, more than %d: split it by role (defined where used)", name, n, maxRoleMethods)
		}
	}
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return "?"
}
