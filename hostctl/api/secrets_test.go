package api_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestSecretsAPI: create, list, show and delete secrets over the TCP
// API with tokens; a member reaches only its project's secrets; no
// response and no byte of the store holds a passphrase.
func TestSecretsAPI(t *testing.T) {
	ctx := context.Background()
	k := newKeyedController(t, "h", controller.Options{}, nil)
	ctl, km, st, dbPath := k.ctl, k.km, k.st, filepath.Join(k.dir, stores.File)
	tt := newTestTokens(t)
	var bodies bytes.Buffer
	h := api.NewHandler(api.Services{Secrets: catalogOf(ctl, catalog.Options{Keys: km})}, slog.New(slog.DiscardHandler), tt.auth)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		bodies.Write(rec.Body.Bytes())
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		io.Copy(w, rec.Body)
	}))
	t.Cleanup(srv.Close)
	admin, alice, bob := client.NewTCP(srv.URL, tt.root), client.NewTCP(srv.URL, tt.alice), client.NewTCP(srv.URL, tt.bob)

	pass := []byte("alice's own passphrase, brought along")
	a, err := alice.CreateSecret(ctx, types.SecretRequest{Name: "backup", Payload: bytes.Clone(pass)})
	if err != nil {
		t.Fatal(err)
	}
	if a.ProjectID != "a" || a.Name != "backup" || a.KeyID == "" || a.KeyGeneration != 1 {
		t.Fatalf("created %+v", a)
	}
	gen, err := admin.CreateSecret(ctx, types.SecretRequest{ProjectID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"member for another project", func() error {
			_, err := alice.CreateSecret(ctx, types.SecretRequest{ProjectID: "b"})
			return err
		}(), http.StatusForbidden},
		{"admin without project", func() error { _, err := admin.CreateSecret(ctx, types.SecretRequest{}); return err }(), http.StatusBadRequest},
		{"bad name", func() error { _, err := alice.CreateSecret(ctx, types.SecretRequest{Name: "a b"}); return err }(), http.StatusBadRequest},
		{"show another project's", func() error { _, err := bob.Secret(ctx, a.UUID); return err }(), http.StatusNotFound},
		{"delete another project's", bob.DeleteSecret(ctx, a.UUID), http.StatusNotFound},
		{"list another project's", func() error { _, err := alice.Secrets(ctx, "b"); return err }(), http.StatusForbidden},
		{"not a uuid", func() error { _, err := admin.Secret(ctx, "x"); return err }(), http.StatusBadRequest},
	}
	for _, tc := range tests {
		if got := status(tc.err); got != tc.want {
			t.Errorf("%s: %v (status %d), want %d", tc.name, tc.err, got, tc.want)
		}
	}
	if l, _ := alice.Secrets(ctx, ""); len(l) != 1 || l[0].UUID != a.UUID {
		t.Errorf("alice lists %+v", l)
	}
	if l, _ := admin.Secrets(ctx, ""); len(l) != 2 {
		t.Errorf("admin lists %+v", l)
	}
	if s, err := bob.Secret(ctx, gen.UUID); err != nil || s.ProjectID != "b" {
		t.Errorf("bob shows %+v %v", s, err)
	}
	if got, _ := km.Passphrase(ctx, a.UUID); !bytes.Equal(got, pass) {
		t.Fatal("stored passphrase differs")
	}
	if err := alice.DeleteSecret(ctx, a.UUID); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Secret(ctx, a.UUID); status(err) != http.StatusNotFound {
		t.Errorf("after delete: %v", err)
	}
	if bytes.Contains(bodies.Bytes(), pass) || strings.Contains(bodies.String(), "payload") {
		t.Error("a response carried the passphrase")
	}
	st.Close()
	raw, _ := os.ReadFile(dbPath)
	if bytes.Contains(raw, pass) {
		t.Error("the store file holds the passphrase")
	}
}
