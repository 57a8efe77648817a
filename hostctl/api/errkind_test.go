package api_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/devices"
	flavorreg "github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// failingFlavors is a flavor registry whose every call fails with err.
type failingFlavors struct{ err error }

func (f failingFlavors) CreateFlavor(context.Context, flavorreg.Flavor) (flavorreg.Flavor, error) {
	return flavorreg.Flavor{}, f.err
}

func (f failingFlavors) Flavor(_ context.Context, name string) (flavorreg.Flavor, error) {
	return flavorreg.Flavor{}, fmt.Errorf("flavor %q: %w", name, f.err)
}
func (f failingFlavors) Flavors(context.Context) ([]flavorreg.Flavor, error) { return nil, f.err }
func (f failingFlavors) DeleteFlavor(context.Context, string) error          { return f.err }

// TestErrorKindsAcrossTheWire: an error of a kind, made anywhere (a
// package's sentinel, wrapped; a sentinel the API has never heard of),
// reaches the client over the real API (an HTTP server, the handler, the
// Go client) as an error of the same kind: errors.Is(err, errkind.NotFound)
// on both sides of the wire, with the status and the message it had.
// The statuses are those the API has always answered.
func TestErrorKindsAcrossTheWire(t *testing.T) {
	flavors := &failingFlavors{}
	tt := newTestTokens(t)
	c := client.NewTCP(newTestServer(t, api.NewHandler(api.Services{Flavors: flavors}, slog.New(slog.DiscardHandler), tt.auth)), tt.root)
	tests := []struct {
		name   string
		err    error
		kind   errkind.Kind
		status int
	}{
		// Each kind, of a sentinel statusOf does not know.
		{"invalid", errkind.New(errkind.Invalid, "new sentinel"), errkind.Invalid, 400},
		{"unauthenticated", errkind.New(errkind.Unauthenticated, "new sentinel"), errkind.Unauthenticated, 401},
		{"forbidden", errkind.New(errkind.Forbidden, "new sentinel"), errkind.Forbidden, 403},
		{"not found", errkind.New(errkind.NotFound, "new sentinel"), errkind.NotFound, 404},
		{"conflict", errkind.New(errkind.Conflict, "new sentinel"), errkind.Conflict, 409},
		{"too large", errkind.New(errkind.TooLarge, "new sentinel"), errkind.TooLarge, 413},
		{"unsupported", errkind.New(errkind.Unsupported, "new sentinel"), errkind.Unsupported, 501},
		{"unavailable", errkind.New(errkind.Unavailable, "new sentinel"), errkind.Unavailable, 503},
		{"marked", errkind.Mark(errors.New("a library's error"), errkind.Conflict), errkind.Conflict, 409},
		// The packages' sentinels, with the statuses statusOf gave them
		// when it listed them.
		{"model.ErrInvalidSpec", &model.SpecError{Errors: []model.FieldError{{Field: "vcpus", Value: 0, Rule: "must be positive"}}}, errkind.Invalid, 400},
		{"keys.ErrInvalid", keys.ErrInvalid, errkind.Invalid, 400},
		{"keyrotation.ErrInvalid", keyrotation.ErrInvalid, errkind.Invalid, 400},
		{"shares.ErrForbidden", shares.ErrForbidden, errkind.Forbidden, 403},
		{"store.ErrNotFound", store.ErrNotFound, errkind.NotFound, 404},
		{"store.ErrConflict", store.ErrConflict, errkind.Conflict, 409},
		{"virt.ErrConflict", virt.ErrConflict, errkind.Conflict, 409},
		{"controller.ErrState", controller.ErrState, errkind.Conflict, 409},
		{"controller.ErrOtherHost", controller.ErrOtherHost, errkind.Conflict, 409},
		{"controller.ErrOwnerAlive", controller.ErrOwnerAlive, errkind.Conflict, 409},
		{"keys.ErrInUse", keys.ErrInUse, errkind.Conflict, 409},
		{"keyrotation.ErrDecrease", keyrotation.ErrDecrease, errkind.Conflict, 409},
		{"devices.ErrUnavailable", fmt.Errorf("%w for web-1: gpu: 0 free: %w", devices.ErrUnavailable, store.ErrConflict), errkind.Conflict, 409},
		{"shares.ErrTransition", shares.ErrTransition, errkind.Conflict, 409},
		{"virt.ErrNotFound", virt.ErrNotFound, errkind.NotFound, 404},
		{"controller.ErrNoHypervisor", controller.ErrNoHypervisor, errkind.Unsupported, 501},
		{"disks.ErrNoKeyManager", disks.ErrNoKeyManager, errkind.Unsupported, 501},
		{"keyrotation.ErrUnavailable", keyrotation.ErrUnavailable, errkind.Unsupported, 501},
		{"virt.ErrUnreachable", virt.ErrUnreachable, errkind.Unavailable, 503},
		{"virt.UnreachableError", &virt.UnreachableError{Where: "/run/libvirt/libvirt-sock", Err: errors.New("connection refused")}, errkind.Unavailable, 503},
		// The outermost kind is the error's.
		{"conflict over not found", fmt.Errorf("%w: %w", controller.ErrState, store.ErrNotFound), errkind.Conflict, 409},
		{"no kind", errors.New("disk full"), 0, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			flavors.err = tc.err
			_, err := c.Flavor(t.Context(), "f1")
			var ae *types.Error
			if !errors.As(err, &ae) || ae.StatusCode() != tc.status {
				t.Fatalf("err = %v (%T, status %d), want a *types.Error with status %d", err, err, status(err), tc.status)
			}
			if want := fmt.Sprintf("flavor %q: %v", "f1", tc.err); tc.status != 500 && err.Error() != want {
				t.Errorf("message %q, want %q", err.Error(), want)
			}
			if got := errkind.Of(err); got != tc.kind {
				t.Errorf("kind %q, want %q", got, tc.kind)
			}
			for _, k := range errkind.All() {
				if errors.Is(err, k) != (k == tc.kind) {
					t.Errorf("errors.Is(err, errkind.%s) = %v", k, !(k == tc.kind))
				}
			}
			if tc.kind != 0 && !errors.Is(tc.err, tc.kind) {
				t.Errorf("on the daemon's side errors.Is(%v, %s) is false", tc.err, tc.kind)
			}
		})
	}
	// Every kind there is makes the round trip (a kind added to errkind
	// needs a status here and its inverse in the client).
	for _, k := range errkind.All() {
		flavors.err = errkind.New(k, "any")
		if _, err := c.Flavor(t.Context(), "f1"); errkind.Of(err) != k || status(err) == http.StatusInternalServerError {
			t.Errorf("kind %q came back as %q (status %d)", k, errkind.Of(err), status(err))
		}
	}
}

// TestErrorKindsOfTheRealAPI: the real controller's refusals reach the
// client as errors of their kind.
func TestErrorKindsOfTheRealAPI(t *testing.T) {
	ctx := context.Background()
	ctl, _ := newController(t)
	tt := newTestTokens(t)
	base := newTestServer(t, api.NewHandler(ctlServices(ctl), slog.New(slog.DiscardHandler), tt.auth))
	admin, alice, anon := client.NewTCP(base, tt.root), client.NewTCP(base, tt.alice), client.NewTCP(base, "")
	if _, err := admin.Apply(ctx, []byte("name: a\naddresses: [10.0.0.1]\n")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		kind errkind.Kind
	}{
		{"unknown instance", func() error { _, err := admin.Get(ctx, "nope"); return err }, errkind.NotFound},
		{"another project's instance", func() error { _, err := alice.Get(ctx, "a"); return err }, errkind.NotFound},
		{"address taken", func() error { _, err := admin.Apply(ctx, []byte("name: b\naddresses: [10.0.0.1]\n")); return err }, errkind.Conflict},
		{"invalid spec", func() error { _, err := admin.Apply(ctx, []byte("name: b\nnics: [{mac: nope}]\n")); return err }, errkind.Invalid},
		{"no hypervisor", func() error { _, err := admin.Start(ctx, "a"); return err }, errkind.Unsupported},
		{"member makes a flavor", func() error { _, err := alice.CreateFlavor(ctx, types.Flavor{Name: "f"}); return err }, errkind.Forbidden},
		{"no token", func() error { _, err := anon.List(ctx); return err }, errkind.Unauthenticated},
		{"spec too large", func() error {
			_, err := admin.Apply(ctx, []byte("name: big\nuser_data: "+strings.Repeat("x", 2<<20)))
			return err
		}, errkind.TooLarge},
		{"no device inventory", func() error { _, err := admin.Devices(ctx, false, "", false); return err }, errkind.Unsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.kind) || errkind.Of(err) != tc.kind {
				t.Errorf("err = %v (status %d, kind %q), want kind %q", err, status(err), errkind.Of(err), tc.kind)
			}
		})
	}
}

// TestUnservedServices: a service the daemon does not wire answers 501
// naming it on its routes, which keep their methods (405 with Allow
// otherwise); the other services are served.
func TestUnservedServices(t *testing.T) {
	ctx := context.Background()
	tt := newTestTokens(t)
	base := newTestServer(t, api.NewHandler(api.Services{Flavors: &failingFlavors{err: store.ErrNotFound}}, slog.New(slog.DiscardHandler), tt.auth))
	admin := client.NewTCP(base, tt.root)
	for _, tc := range []struct {
		name string
		call func() error
		says string
	}{
		{"list instances", func() error { _, err := admin.List(ctx); return err }, "instances"},
		{"start", func() error { _, err := admin.Start(ctx, "a"); return err }, "instances"},
		{"images", func() error { _, err := admin.Images(ctx); return err }, "images"},
		{"secrets", func() error { _, err := admin.Secrets(ctx, ""); return err }, "secrets"},
		{"hosts", func() error { _, err := admin.Hosts(ctx); return err }, "hosts"},
		{"events", func() error { _, err := admin.Events(ctx, "devices", "", 0, 0); return err }, "audit events"},
		{"shares", func() error { _, err := admin.Shares(ctx); return err }, "shares"},
		{"keys", func() error { _, err := admin.Keys(ctx, ""); return err }, "key rotation"},
		{"devices", func() error { _, err := admin.Devices(ctx, false, "", false); return err }, "device inventory"},
	} {
		if err := tc.call(); status(err) != http.StatusNotImplemented || !errors.Is(err, errkind.Unsupported) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v (status %d), want 501 naming %q", tc.name, err, status(err), tc.says)
		}
	}
	if _, err := admin.Flavor(ctx, "f1"); !errors.Is(err, errkind.NotFound) {
		t.Errorf("the flavors served: %v, want not found", err)
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/images", nil)
	req.Header.Set("Authorization", "Bearer "+tt.root)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("PUT /v1/images unserved: %d Allow %q, want 405 Allow GET, HEAD, POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// TestServicesAreNarrow: the handler takes each service separately, and
// none is a composite of more than 8 methods (api.Controller had 37).
func TestServicesAreNarrow(t *testing.T) {
	st := reflect.TypeFor[api.Services]()
	for i := range st.NumField() {
		f := st.Field(i)
		if f.Type.Kind() != reflect.Interface {
			t.Errorf("Services.%s is a %s, want an interface", f.Name, f.Type)
			continue
		}
		if n := f.Type.NumMethod(); n > 8 || n == 0 {
			t.Errorf("Services.%s (%s) has %d methods, want 1 to 8", f.Name, f.Type, n)
		}
	}
}
