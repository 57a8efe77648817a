package migrate_test

import (
	"os"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// The hostctl binary is built once for the package (hostctlBin's
// buildOnce) into a directory that outlives the test that builds it —
// in the test's own TempDir it would be gone for every later test —
// and is removed when the package's tests end.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// packageTB is t with TempDir the package's binary directory.
type packageTB struct {
	testing.TB
	dir string
}

func (p packageTB) TempDir() string { return p.dir }

// builtOnce builds hostctl for the package (hostctlBin calls it).
func builtOnce(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vmeta-mig-bin-")
		if err != nil {
			t.Fatal(err)
		}
		binDir = dir
		hostctl = testenv.BuildCrashBinary(packageTB{t, dir}, "github.com/vmeta/vmeta/hostctl/cmd/hostctl")
	})
}
