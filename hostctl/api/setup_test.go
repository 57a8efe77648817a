package api_test

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

// newController returns a controller without a hypervisor over an
// embedded store in a temporary data directory, and that directory.
func newController(t *testing.T) (*controller.Controller, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return controller.New(st, controller.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)}), dir
}
