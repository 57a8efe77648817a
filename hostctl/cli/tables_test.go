package cli_test

import (
	"encoding/json"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/testenv"
)

var updateTables = flag.Bool("update-tables", false, "rewrite testdata/tables.golden")

// TestTablesUnchanged: what the list and show commands print, as table
// and as JSON, byte for byte, against canned answers of the admin API
// (every field filled, and a second item with the optional ones empty);
// testdata/tables.golden was written by the commands before they shared
// their table printer. A list the API answers with null prints [] as
// JSON.
func TestTablesUnchanged(t *testing.T) {
	device := testenv.Filled[types.Device](t)
	share := testenv.Filled[types.Share](t)
	mapping := testenv.Filled[types.ShareMapping](t)
	flavor := testenv.Filled[types.Flavor](t)
	image := testenv.Filled[types.Image](t)
	legacy := types.Image{Name: "legacy", Format: "raw", File: "legacy.img", Legacy: true}
	secret := testenv.Filled[types.Secret](t)
	host := testenv.Filled[types.HostStatus](t)
	answers := map[string]any{
		"/v1/devices":            types.DeviceList{Devices: []types.Device{device, {Address: "0000:00:01.0", Host: "h2", Total: 1}}},
		"/v1/devices/a":          device,
		"/v1/shares":             types.SharesBody{Shares: []types.Share{share, {ID: "s2", ProjectID: "p2", Proto: "nfs"}}},
		"/v1/shares/s":           types.ShareBody{Share: share},
		"/v1/servers/i/shares":   types.ServerSharesBody{Shares: []types.ShareMapping{mapping, {ShareID: "s2", Tag: "t2", Status: "inactive"}}},
		"/v1/flavors":            []types.Flavor{flavor, {Name: "tiny", VCPUs: 1, RAM: 64}},
		"/v1/flavors/f":          flavor,
		"/v1/images":             []types.Image{image, legacy},
		"/v1/images/i":           image,
		"/v1/images/legacy":      legacy,
		"/v1/secrets":            []types.Secret{secret, {UUID: "u2", KeyID: "k", KeyGeneration: 2}},
		"/v1/secrets/u":          secret,
		"/v1/hosts":              []types.HostStatus{host, {Host: "h2", Down: true}},
		"/v1/keys":               nil,
		"/v1/secrets?project=no": nil,
	}
	sock := filepath.Join(t.TempDir(), "hostctl.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := answers[r.URL.RequestURI()]
		if !ok {
			http.Error(w, `{"error":"no canned answer"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a)
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)

	var got strings.Builder
	for _, args := range [][]string{
		{"device", "list"}, {"device", "show", "a"},
		{"share", "list"}, {"share", "show", "s"}, {"share", "mappings", "i"},
		{"flavor", "list"}, {"flavor", "show", "f"},
		{"image", "list"}, {"image", "show", "i"}, {"image", "show", "legacy"},
		{"secret", "list"}, {"secret", "list", "--project", "no"}, {"secret", "show", "u"},
		{"host", "list"}, {"host", "show", host.Host},
		{"keys", "status"},
	} {
		for _, output := range []string{"table", "json"} {
			line := append(append([]string{}, args...), "--socket", sock, "--output", output)
			code, out, errOut := hostctl(t, line...)
			if code != 0 || errOut != "" {
				t.Errorf("hostctl %s: exit %d, stderr %q", strings.Join(line, " "), code, errOut)
			}
			got.WriteString("$ hostctl " + strings.Join(args, " ") + " --output " + output + "\n" + out)
		}
	}
	testenv.Golden(t, filepath.Join("testdata", "tables.golden"), []byte(got.String()), *updateTables)
}
