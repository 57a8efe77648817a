package api_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	devinv "github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// fakeDevices records the calls of the devices resource and answers with
// err when set.
type fakeDevices struct {
	calls []string
	err   error
}

func (f *fakeDevices) ListDevices(_ context.Context, nc bool, trait string, all bool) ([]devinv.Device, error) {
	f.calls = append(f.calls, fmt.Sprintf("list %v %q %v", nc, trait, all))
	return []devinv.Device{{Address: "0000:3b:00.0", Total: 1}}, f.err
}

func (f *fakeDevices) Show(_ context.Context, addr string) (devinv.Device, error) {
	f.calls = append(f.calls, "show "+addr)
	return devinv.Device{Address: addr, Total: 1}, f.err
}

func (f *fakeDevices) Clean(_ context.Context, addr string) (devinv.Device, error) {
	f.calls = append(f.calls, "clean "+addr)
	return devinv.Device{Address: addr, Total: 1}, f.err
}

func TestDevicesResource(t *testing.T) {
	tt := newTestTokens(t)
	fake := &fakeDevices{}
	log := slog.New(slog.DiscardHandler)
	base := newTestServer(t, api.NewHandler(api.Services{Devices: fake}, log, tt.auth))
	admin, member := client.NewTCP(base, tt.root), client.NewTCP(base, tt.alice)
	ctx := t.Context()

	if _, err := member.Devices(ctx, false, "", false); status(err) != http.StatusForbidden {
		t.Errorf("member list: %v, want 403", err)
	}
	if _, err := member.CleanDevice(ctx, "0000:3b:00.0"); status(err) != http.StatusForbidden {
		t.Errorf("member clean: %v, want 403", err)
	}
	if len(fake.calls) != 0 {
		t.Fatalf("refused requests reached the inventory: %v", fake.calls)
	}
	list, err := admin.Devices(ctx, true, types.TraitOneTimeUse, true)
	if err != nil || len(list) != 1 {
		t.Fatalf("admin list: %v %v", list, err)
	}
	if _, err := admin.Device(ctx, "0000:3b:00.0"); err != nil {
		t.Fatal(err)
	}
	if d, err := admin.CleanDevice(ctx, "0000:3b:00.0"); err != nil || d.Address != "0000:3b:00.0" {
		t.Fatalf("clean: %+v %v", d, err)
	}
	want := `list true "HW_PCI_ONE_TIME_USE" true|show 0000:3b:00.0|clean 0000:3b:00.0`
	if got := strings.Join(fake.calls, "|"); got != want {
		t.Errorf("calls %s, want %s", got, want)
	}

	// Errors map to statuses in one place.
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("clean: device in use: %w", store.ErrConflict), http.StatusConflict},
		{fmt.Errorf("clean: %w", store.ErrNotFound), http.StatusNotFound},
		{&model.SpecError{Errors: []model.FieldError{{Field: "address", Value: "3b:00.0", Rule: "is not a PCI address"}}}, http.StatusBadRequest},
		{errors.New("store down"), http.StatusInternalServerError},
	} {
		fake.err = tc.err
		if _, err := admin.CleanDevice(ctx, "3b:00.0"); status(err) != tc.want {
			t.Errorf("clean failing with %v: %v, want %d", tc.err, err, tc.want)
		}
	}
	fake.err = nil

	req, _ := http.NewRequest(http.MethodGet, base+"/v1/devices?needs_cleaning=maybe", nil)
	req.Header.Set("Authorization", "Bearer "+tt.root)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("needs_cleaning=maybe: %v %v, want 400", resp.StatusCode, err)
	}
	resp.Body.Close()
	req, _ = http.NewRequest(http.MethodGet, base+"/v1/devices/0000:3b:00.0/clean", nil)
	req.Header.Set("Authorization", "Bearer "+tt.root)
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET .../clean: %v Allow %q, want 405 Allow POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp.Body.Close()

	// A daemon without an inventory answers 501.
	bare := client.NewTCP(newTestServer(t, api.NewHandler(api.Services{}, log, tt.auth)), tt.root)
	if _, err := bare.Devices(ctx, false, "", false); status(err) != http.StatusNotImplemented {
		t.Errorf("no inventory: %v, want 501", err)
	}
}
