package configdrive

import (
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// TestMain bounds fuzz input minimization (drive images are tens of KB;
// see testenv.FuzzMain).
func TestMain(m *testing.M) { testenv.FuzzMain(m) }
