package api_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/testenv"
)

// Flavors and images over the TCP API: members list and show them, only
// admins create, import and delete; bad input is a 400 naming the key and
// the value; statuses are the documented ones.
func TestFlavorsAndImagesAPI(t *testing.T) {
	qemuImg := testenv.LookPath(t, "qemu-img")
	ctx := context.Background()
	admin, alice, _, _ := tcpAPI(t)

	f := types.Flavor{Name: "m1.enc", VCPUs: 1, RAM: 128, Disk: 1, ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "yes", "other:key": "v"}}
	if _, err := alice.CreateFlavor(ctx, f); status(err) != http.StatusForbidden {
		t.Errorf("member creates a flavor: %v", err)
	}
	if _, err := admin.CreateFlavor(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateFlavor(ctx, f); status(err) != http.StatusConflict {
		t.Errorf("second create: %v", err)
	}
	bad := types.Flavor{Name: "m1.bad", VCPUs: 1, RAM: 128, ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "ja"}}
	_, err := admin.CreateFlavor(ctx, bad)
	var ae *types.Error
	if status(err) != http.StatusBadRequest || !asError(err, &ae) || len(ae.Fields) != 1 ||
		ae.Fields[0].Field != "extra_specs[hw:ephemeral_encryption]" || ae.Fields[0].Value != "ja" {
		t.Errorf("bad boolean: %v (%+v)", err, ae)
	}
	if fs, err := alice.Flavors(ctx); err != nil || len(fs) != 1 || fs[0].ExtraSpecs["other:key"] != "v" {
		t.Errorf("member lists flavors: %+v, %v", fs, err)
	}
	if _, err := alice.Flavor(ctx, "nope"); status(err) != http.StatusNotFound {
		t.Errorf("unknown flavor: %v", err)
	}
	if err := alice.DeleteFlavor(ctx, "m1.enc"); status(err) != http.StatusForbidden {
		t.Errorf("member deletes a flavor: %v", err)
	}

	p := filepath.Join(t.TempDir(), "img")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", p, "16M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.ImportImage(ctx, "deb", nil, bytes.NewReader(data)); status(err) != http.StatusForbidden {
		t.Errorf("member imports: %v", err)
	}
	img, err := admin.ImportImage(ctx, "deb", map[string]string{"hw_ephemeral_encryption_format": "luks"}, bytes.NewReader(data))
	if err != nil || img.Format != "qcow2" {
		t.Fatalf("import: %+v, %v", img, err)
	}
	if _, err := admin.ImportImage(ctx, "deb2", map[string]string{"hw_ephemeral_encryption_format": "LUKS"}, bytes.NewReader(data)); status(err) != http.StatusBadRequest ||
		!strings.Contains(err.Error(), "properties[hw_ephemeral_encryption_format]") {
		t.Errorf("bad format: %v", err)
	}
	if got, err := alice.Image(ctx, "deb"); err != nil || got.Properties["hw_ephemeral_encryption_format"] != "luks" {
		t.Errorf("member shows the image: %+v, %v", got, err)
	}

	// A body that is not the documented multipart: 400 (on a unix
	// socket, where the caller is an administrator).
	sock := serveUnix(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for name, body := range map[string]func() (string, io.Reader){
		"not multipart": func() (string, io.Reader) { return "application/octet-stream", bytes.NewReader(data) },
		"file first": func() (string, io.Reader) {
			var b bytes.Buffer
			mw := multipart.NewWriter(&b)
			w, _ := mw.CreateFormFile("file", "x")
			w.Write(data)
			mw.Close()
			return mw.FormDataContentType(), &b
		},
	} {
		ct, r := body()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://hostctl/v1/images", r)
		req.Header.Set("Content-Type", ct)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", name, resp.StatusCode)
		}
	}

	// In use by alice's instance: neither goes, and the 409 names it.
	if _, err := alice.Apply(ctx, []byte("name: a-1\nflavor: m1.enc\nimage: deb\naddresses: [10.9.0.7]\n")); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteFlavor(ctx, "m1.enc"); status(err) != http.StatusConflict || !strings.Contains(err.Error(), "a-1") {
		t.Errorf("delete flavor in use: %v", err)
	}
	if err := admin.DeleteImage(ctx, "deb"); status(err) != http.StatusConflict || !strings.Contains(err.Error(), "a-1") {
		t.Errorf("delete image in use: %v", err)
	}
	// Resize to a flavor that does not exist: 404.
	if _, err := alice.Resize(ctx, "a-1", "nope"); status(err) != http.StatusNotFound {
		t.Errorf("resize to an unknown flavor: %v", err)
	}
}

// serveUnix serves the admin API on a unix socket and returns its path.
func serveUnix(t *testing.T) string {
	t.Helper()
	ctl, dir := newController(t)
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.Handler(ctlServices(ctl), slog.New(slog.DiscardHandler))}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func asError(err error, target **types.Error) bool {
	return errors.As(err, target)
}
