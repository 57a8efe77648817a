package hostdir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
)

func TestDirs(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "shares")
	in := filepath.Join(root, "data")
	outside := filepath.Join(base, "etc")
	for _, d := range []string{in, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := Root{Dir: root}
	for _, tc := range []struct {
		source, want string
	}{
		{in, ""},
		{"", "is required"},
		{"nfs.example:/export", "NFS export"},
		{"[fd00::1]:/export", "NFS export"},
		{"relative/dir", "absolute"},
		{root, "share root " + root + " itself"},
		{outside, "outside the share root"},
		{filepath.Join(root, "escape"), "resolves to " + outside},
		{filepath.Join(root, "missing"), "does not exist"},
		{filepath.Join(root, "file"), "is not a directory"},
	} {
		dirs, err := r.Dirs([]model.Share{{ShareID: "s1", Source: tc.source}})
		if tc.want == "" {
			if err != nil || dirs["s1"] != in {
				t.Errorf("%q: dirs=%v err=%v", tc.source, dirs, err)
			}
			continue
		}
		var se *model.SpecError
		if !errors.As(err, &se) || len(se.Errors) != 1 || se.Errors[0].Field != "shares[0].source" || !strings.Contains(se.Errors[0].Rule, tc.want) {
			t.Errorf("%q: err = %v, want a shares[0].source error containing %q", tc.source, err, tc.want)
		}
	}
	// A root that does not exist refuses every source, naming the flag.
	_, err := Root{Dir: filepath.Join(base, "nope")}.Dirs([]model.Share{{ShareID: "s", Source: in}})
	if err == nil || !strings.Contains(err.Error(), "--share-root") {
		t.Errorf("missing root: %v", err)
	}
}
