package catalog_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
)

// TestImportImageKeyChecks (issue 20, item 2): an import naming a secret
// the key manager does not have, or one whose passphrase does not open
// the image's LUKS header, is refused naming the key id, and nothing is
// kept; the right secret opens a LUKS qcow2 and a raw LUKS file.
func TestImportImageKeyChecks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	right, err := e.keys.Create(ctx, keys.Request{Name: "right", ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := e.keys.Create(ctx, keys.Request{Name: "wrong", ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := e.keys.Passphrase(ctx, right.UUID)
	qcow := e.luksQcow2(t, pass)
	raw := rawLUKS(t, pass)
	missing := keys.NewUUID()

	// (An import makes the image directory first.)
	if err := os.MkdirAll(filepath.Join(e.dir, "images"), 0o750); err != nil {
		t.Fatal(err)
	}
	before := e.listing(t)
	for _, tc := range []struct {
		name, keyID string
		file        []byte
		want        string
	}{
		{"no such secret", missing, qcow, "names no secret"},
		{"wrong passphrase", wrong.UUID, qcow, "does not open"},
		{"wrong passphrase, raw LUKS", wrong.UUID, raw, "does not open"},
		{"not a uuid", "key-1", qcow, "UUID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.cat.ImportImage(ctx, "img-x", map[string]string{"os_encrypt_key_id": tc.keyID, "os_encrypt_format": "luks"}, bytes.NewReader(tc.file))
			var se *model.SpecError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.keyID) || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "properties[os_encrypt_key_id]") {
				t.Errorf("import = %v, want a field error naming properties[os_encrypt_key_id]=%s and %q", err, tc.keyID, tc.want)
			}
		})
	}
	if after := e.listing(t); after != before {
		t.Errorf("refused imports left changes:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if imgs, err := e.cat.Images(ctx); err != nil || len(imgs) != 0 {
		t.Errorf("images after refused imports: %v %v", imgs, err)
	}
	// Both imports name the same secret: the first released its lock.
	for name, file := range map[string][]byte{"good-qcow2": qcow, "good-raw": raw} {
		img, err := e.cat.ImportImage(ctx, name, map[string]string{"os_encrypt_key_id": right.UUID, "os_encrypt_format": "luks"}, bytes.NewReader(file))
		if err != nil || !img.Encrypted {
			t.Errorf("import %s with its own secret: %+v %v", name, img, err)
		}
	}
}
