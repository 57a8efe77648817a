package api_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
)

// serve runs the admin API over a real controller and store on a unix
// socket, and returns a client for it.
func serve(t *testing.T) *client.Client {
	t.Helper()
	ctl, dir := newController(t)
	log := slog.New(slog.DiscardHandler)
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.Handler(ctlServices(ctl), log)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return client.NewUnix(sock)
}

func TestStatusMapping(t *testing.T) {
	ctx := context.Background()
	c := serve(t)
	if _, err := c.Apply(ctx, []byte("name: a\naddresses: [10.0.0.1]\n")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		call   func() error
		status int
		text   string
	}{
		{"invalid spec", func() error {
			_, err := c.Apply(ctx, []byte("name: b\nnics: [{mac: nope}]\n"))
			return err
		}, 400, "nics[0].mac"},
		{"address conflict", func() error {
			_, err := c.Apply(ctx, []byte("name: b\naddresses: [10.0.0.1]\n"))
			return err
		}, 409, "10.0.0.1"},
		{"unknown instance", func() error { _, err := c.Get(ctx, "nope"); return err }, 404, "not found"},
		{"delete unknown", func() error { return c.Delete(ctx, "nope") }, 404, "not found"},
		{"bad drive format", func() error { _, err := c.ConfigDrive(ctx, "a", "udf"); return err }, 400, "udf"},
		{"spec too large", func() error {
			_, err := c.Apply(ctx, []byte("name: big\nuser_data: "+strings.Repeat("x", 2<<20)))
			return err
		}, 413, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ae *types.Error
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v (%T), want *types.Error", err, err)
			}
			if ae.StatusCode() != tt.status || !strings.Contains(ae.Error(), tt.text) {
				t.Fatalf("status %d %q, want %d containing %q", ae.StatusCode(), ae.Error(), tt.status, tt.text)
			}
		})
	}
	// The invalid spec's error lists the field, value and rule.
	_, err := c.Apply(ctx, []byte("name: b\nnics: [{mac: nope}]\n"))
	var ae *types.Error
	if !errors.As(err, &ae) || len(ae.Fields) == 0 || ae.Fields[0].Field != "nics[0].mac" || ae.Fields[0].Value != "nope" || ae.Fields[0].Rule == "" {
		t.Fatalf("fields = %+v", ae)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 || list[0].Spec.Name != "a" {
		t.Fatalf("refused requests changed the instance list: %v %v", list, err)
	}
}

func TestDaemonDown(t *testing.T) {
	c := client.NewUnix(filepath.Join(t.TempDir(), "absent.sock"))
	_, err := c.List(context.Background())
	if err == nil || !strings.Contains(err.Error(), "hostctl serve") {
		t.Fatalf("err = %v, want a hint to start the daemon", err)
	}
}
