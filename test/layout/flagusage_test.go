package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// usageArg is the index of the usage argument of the flag package's
// definition functions and methods (flag.X and (*flag.FlagSet).X).
var usageArg = map[string]int{
	"Bool": 2, "Int": 2, "Int64": 2, "Uint": 2, "Uint64": 2, "String": 2, "Float64": 2, "Duration": 2,
	"BoolVar": 3, "IntVar": 3, "Int64Var": 3, "UintVar": 3, "Uint64Var": 3, "StringVar": 3, "Float64Var": 3, "DurationVar": 3,
	"TextVar": 3, "Var": 2, "Func": 1, "BoolFunc": 1,
}

// TestFlagUsageHasNoBackquotes: in Go's flag package a `backquoted` word
// of a flag's usage string becomes the name of the flag's argument in
// -help ("-key-rotation hostctl keys policy"), so no flag of any binary
// (hostctl, vmeta-metadata, vmeta-agent, the test and bench tools) has a
// backquote in its usage string. Found in the source, so that every
// binary is covered; hostctl's rendered help is checked by
// hostctl/cli/serve's TestHelpFlagArguments.
func TestFlagUsageHasNoBackquotes(t *testing.T) {
	root := moduleRoot(t)
	checked := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			i, ok := usageArg[sel.Sel.Name]
			if !ok || len(call.Args) != i+1+boolToInt(sel.Sel.Name == "Func" || sel.Sel.Name == "BoolFunc") {
				return true
			}
			usage, ok := stringValue(call.Args[i])
			if !ok {
				return true
			}
			checked++
			if strings.Contains(usage, "`") {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s:%d: the usage of a flag holds a backquote, which -help turns into the argument's name: %q",
					rel, fset.Position(call.Pos()).Line, usage)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Errorf("only %d flag usage strings found: the flag definitions changed shape?", checked)
	}
}

// boolToInt is 1 for true: Func and BoolFunc take the usage before one
// argument (the function), the others before none.
func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stringValue is the value of a string literal, or of literals joined by
// +; ok is false for anything else.
func stringValue(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, okx := stringValue(e.X)
		y, oky := stringValue(e.Y)
		// A literal joined to a name still counts: its text is part of
		// the usage.
		return x + y, okx || oky
	case *ast.ParenExpr:
		return stringValue(e.X)
	}
	return "", false
}
