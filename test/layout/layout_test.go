// Package layout checks rules about the shape of the code base: every
// package has exactly one package comment, and the guest agent stays free
// of host-side code and heavy dependencies so it remains a small static
// binary.
package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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
		pkgs, err := parser.ParseDir(token.NewFileSet(), p, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		for _, pkg := range pkgs {
			var withDoc []string
			for name, f := range pkg.Files {
				if f.Doc != nil {
					withDoc = append(withDoc, filepath.Base(name))
				}
			}
			rel, _ := filepath.Rel(root, p)
			switch {
			case len(withDoc) == 0:
				t.Errorf("%s: package %s has no package comment", rel, pkg.Name)
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

func TestGuestDependencies(t *testing.T) {
	root := moduleRoot(t)
	cmd := exec.Command("go", "list", "-deps", "./guest/...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./guest/...: %v", err)
	}
	forbidden := []string{
		"github.com/vmeta/vmeta/hostctl",
		"github.com/vmeta/vmeta/server",
		"github.com/vmeta/vmeta/internal/store",
		"github.com/vmeta/vmeta/internal/keys",
		"github.com/digitalocean/go-libvirt",
		"github.com/redis/go-redis",
		"go.etcd.io/bbolt",
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list printed no packages for ./guest/...")
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("guest depends on %s", dep)
			}
		}
	}
}
