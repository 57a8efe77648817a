package metadata_test

import (
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// TestMain bounds fuzz input minimization (stored trees are a few KB; see
// testenv.FuzzMain).
func TestMain(m *testing.M) { testenv.FuzzMain(m) }
