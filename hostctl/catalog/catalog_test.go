package catalog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
)

// TestInUseRules: a flavor or an image an instance uses is not deleted
// and the conflict names the instances; once unused each goes, with its
// audit event. An image's secret goes with it through the core's one
// rule only under os_encrypt_key_deletion_policy on_image_deletion, and a
// secret the rule keeps (something else names it) is said in the
// image.deleted event while the image is gone.
func TestInUseRules(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.cat.CreateFlavor(ctx, flavors.Flavor{Name: "f1", VCPUs: 1, RAM: 128, Disk: 1}); err != nil {
		t.Fatal(err)
	}
	e.core.users["flavor f1"] = []string{"web-1", "web-2"}
	if err := e.cat.DeleteFlavor(ctx, "f1"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "web-1, web-2") {
		t.Errorf("delete of a flavor in use = %v, want a conflict naming web-1, web-2", err)
	}
	delete(e.core.users, "flavor f1")
	if err := e.cat.DeleteFlavor(ctx, "f1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.Flavor(ctx, "f1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("flavor after its delete: %v", err)
	}
	if got, want := e.events(t, catalog.StreamFlavors), []string{"flavor.created", "flavor.deleted"}; !eventTypes(got, want) {
		t.Errorf("flavor events %q, want %q", got, want)
	}

	sec, err := e.keys.Create(ctx, keys.Request{Name: "img", ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := e.keys.Passphrase(ctx, sec.UUID)
	file := e.luksQcow2(t, pass)
	for _, tc := range []struct {
		name, policy string
		releaseErr   error
		released     bool   // the rule was asked to delete the secret
		kept         string // in the event: why the secret stayed
	}{
		{name: "on-delete", policy: "on_image_deletion", released: true},
		{name: "kept", policy: "on_image_deletion", releaseErr: fmt.Errorf("delete secret %s: %w: named by image other", sec.UUID, keys.ErrInUse), released: true, kept: "named by image other"},
		{name: "gone-already", policy: "on_image_deletion", releaseErr: keys.ErrNotFound, released: true},
		{name: "do-not-delete", policy: "do_not_delete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			props := map[string]string{"os_encrypt_key_id": sec.UUID, "os_encrypt_format": "luks", "os_encrypt_key_deletion_policy": tc.policy}
			if _, err := e.cat.ImportImage(ctx, tc.name, props, bytes.NewReader(file)); err != nil {
				t.Fatal(err)
			}
			e.core.users["image "+tc.name] = []string{"app-1"}
			e.core.released, e.core.releaseErr = nil, tc.releaseErr
			if err := e.cat.DeleteImage(ctx, tc.name); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "app-1") {
				t.Errorf("delete of an image in use = %v, want a conflict naming app-1", err)
			}
			if len(e.core.released) != 0 {
				t.Errorf("an image in use released its secret: %q", e.core.released)
			}
			delete(e.core.users, "image "+tc.name)
			if err := e.cat.DeleteImage(ctx, tc.name); err != nil {
				t.Fatal(err)
			}
			if _, err := e.cat.Image(ctx, tc.name); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("image after its delete: %v", err)
			}
			var want []string
			if tc.released {
				want = []string{"secret " + sec.UUID + ", image " + tc.name}
			}
			if !slices.Equal(e.core.released, want) {
				t.Errorf("released %q, want %q", e.core.released, want)
			}
			evs := e.events(t, catalog.StreamImages)
			last := evs[len(evs)-1]
			if !strings.HasPrefix(last, "image.deleted ") || !strings.Contains(last, `"name":"`+tc.name+`"`) ||
				strings.Contains(last, "secret_kept") != (tc.kept != "") || !strings.Contains(last, tc.kept) {
				t.Errorf("last image event %s, want image.deleted of %s (secret kept: %q)", last, tc.name, tc.kept)
			}
		})
	}
}

// TestNoKeyManager: without a key manager the secrets are not served
// (501) and an image naming a secret is refused as a conflict naming the
// field, nothing imported.
func TestNoKeyManager(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cat := catalog.New(catalog.Options{Flavors: e.core.flavors, Images: e.core.images, Users: e.core, Secrets: e.core})
	if _, err := cat.CreateSecret(ctx, types.SecretRequest{ProjectID: "p"}); !errors.Is(err, errkind.Unsupported) {
		t.Errorf("create secret = %v, want unsupported", err)
	}
	if err := cat.DeleteSecret(ctx, keys.NewUUID()); !errors.Is(err, catalog.ErrNoKeyManager) || len(e.core.released) != 0 {
		t.Errorf("delete secret = %v (released %q), want ErrNoKeyManager, nothing released", err, e.core.released)
	}
	_, err := cat.ImportImage(ctx, "enc", map[string]string{"os_encrypt_key_id": keys.NewUUID()}, strings.NewReader("x"))
	if !errors.Is(err, store.ErrConflict) || errkind.Of(err) != errkind.Conflict || !strings.Contains(err.Error(), "properties[os_encrypt_key_id]") {
		t.Errorf("import naming a secret = %v (kind %q), want a conflict naming the field", err, errkind.Of(err))
	}
	if imgs, err := cat.Images(ctx); err != nil || len(imgs) != 0 {
		t.Errorf("images: %v %v", imgs, err)
	}
}

// eventTypes reports whether the events got are of the types want, in
// order.
func eventTypes(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !strings.HasPrefix(got[i], want[i]+" ") {
			return false
		}
	}
	return true
}
