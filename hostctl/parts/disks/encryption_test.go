package disks_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// TestEncryptionConflictError: an encryption request this host cannot
// honour is a conflict (not an invalid spec) that still hands out its
// field errors, naming field and value.
func TestEncryptionConflictError(t *testing.T) {
	err := fmt.Errorf("apply x: %w", disks.EncryptionConflict("disks[0].encryption_format", "plain", "no"))
	var se *model.SpecError
	if !errors.Is(err, store.ErrConflict) || !errors.Is(err, disks.ErrEncryption) || errors.Is(err, model.ErrInvalidSpec) || !errors.As(err, &se) || len(se.Errors) != 1 {
		t.Fatalf("%v", err)
	}
	if !strings.Contains(err.Error(), `disks[0].encryption_format`) || !strings.Contains(err.Error(), "plain") {
		t.Fatal(err)
	}
}
