package api_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestSecretDeleteNamedByImage (issue 20, items 1 and 2) over the TCP
// API with the real qemu-img: `secret delete` of a secret an image names
// is a 409 naming the image; an image import naming a secret the key
// manager does not have is a 400 naming the key id.
func TestSecretDeleteNamedByImage(t *testing.T) {
	ctx := context.Background()
	qemuImg, qemuIO := testenv.LookPath(t, "qemu-img"), testenv.LookPath(t, "qemu-io")
	tool := encryption.New(encryption.Options{QemuImg: qemuImg, QemuIO: qemuIO, IterTime: 10 * time.Millisecond})
	k := newKeyedController(t, "h", controller.Options{QemuImg: qemuImg}, tool)
	ctl, km := k.ctl, k.km
	tt := newTestTokens(t)
	srv := httptest.NewServer(api.NewHandler(ctlServicesWith(ctl, catalog.Options{Keys: km, LUKS: tool}), slog.New(slog.DiscardHandler), tt.auth))
	t.Cleanup(srv.Close)
	admin, alice := client.NewTCP(srv.URL, tt.root), client.NewTCP(srv.URL, tt.alice)

	sec, err := alice.CreateSecret(ctx, types.SecretRequest{Name: "image-key"})
	if err != nil {
		t.Fatal(err)
	}
	pass, err := km.Passphrase(ctx, sec.UUID)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "enc.qcow2")
	if err := tool.Create(ctx, encryption.Disk{Path: p, Size: "16M"}, pass); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	missing := keys.NewUUID()
	_, err = admin.ImportImage(ctx, "enc-x", map[string]string{"os_encrypt_key_id": missing, "os_encrypt_format": "luks"}, bytes.NewReader(b))
	if status(err) != http.StatusBadRequest || !strings.Contains(err.Error(), missing) {
		t.Errorf("import naming no secret = %v, want 400 naming %s", err, missing)
	}
	if _, err := admin.ImportImage(ctx, "enc-a", map[string]string{"os_encrypt_key_id": sec.UUID, "os_encrypt_format": "luks",
		"os_encrypt_key_deletion_policy": "on_image_deletion"}, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	err = alice.DeleteSecret(ctx, sec.UUID)
	if status(err) != http.StatusConflict || !strings.Contains(err.Error(), "image enc-a") {
		t.Errorf("secret delete of a secret an image names = %v, want 409 naming image enc-a", err)
	}
	if _, err := alice.Secret(ctx, sec.UUID); err != nil {
		t.Errorf("the secret after the refused delete: %v", err)
	}
}
