package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// instanceJSON is an instance as `hostctl instance show/apply --output
// json` prints it.
type instanceJSON struct {
	Spec struct {
		Name      string   `json:"name"`
		UUID      string   `json:"uuid"`
		Hostname  string   `json:"hostname"`
		Addresses []string `json:"addresses"`
	} `json:"spec"`
	Revision        int64           `json:"revision"`
	DocumentVersion int64           `json:"document_version"`
	ConfigDrive     string          `json:"config_drive"`
	Devices         json.RawMessage `json:"devices"`
}

func decodeJSON(t testing.TB, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, s)
	}
}

// checkInstance checks an instance printed as JSON against the spec.
func checkInstance(t *testing.T, where string, inst instanceJSON, s testSpec, revision, version int64, drive string) {
	t.Helper()
	if inst.Spec.Name != s.Name || inst.Spec.UUID != s.UUID || inst.Spec.Hostname != s.Hostname || !reflect.DeepEqual(inst.Spec.Addresses, s.Addresses) {
		t.Errorf("%s: spec = %+v, want name %s, uuid %s, hostname %s, addresses %v", where, inst.Spec, s.Name, s.UUID, s.Hostname, s.Addresses)
	}
	if inst.Revision != revision {
		t.Errorf("%s: revision %d, want %d", where, inst.Revision, revision)
	}
	if version >= 0 && inst.DocumentVersion != version {
		t.Errorf("%s: document_version %d, want %d", where, inst.DocumentVersion, version)
	}
	if inst.ConfigDrive != drive {
		t.Errorf("%s: config_drive %q, want %q", where, inst.ConfigDrive, drive)
	}
	checkDevices(t, where+": devices", inst.Devices, s, "latest")
}

// checkLines asserts that each regexp matches a whole line of out.
func checkLines(t *testing.T, where, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(`(?m)^` + p + `\s*$`).MatchString(out) {
			t.Errorf("%s: no line matching %q in:\n%s", where, p, out)
		}
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	const uuid = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f2a3b4c5d"
	spec := webSpec(uuid)
	s := parseTestSpec(t, spec)
	d := startDaemon(t, daemonOptions{})
	specFile := writeSpec(t, spec)
	drive := filepath.Join(d.DataDir, "instances", "web-1", "disk.config")
	mdURL := d.URL() + "/openstack/latest/meta_data.json"

	// Create.
	var inst instanceJSON
	decodeJSON(t, d.MustCtl("instance", "apply", "-f", specFile, "--output", "json").stdout, &inst)
	checkInstance(t, "first apply", inst, s, 1, 1, drive)
	if _, err := os.Stat(drive); err != nil {
		t.Errorf("config drive after apply: %v", err)
	}
	md1 := mustGet(t, mdURL)
	checkLatestMetaData(t, "meta_data.json after first apply", md1, s)

	// Re-apply the same spec: a new revision and metadata version, and a
	// republished document (fresh random_seed).
	r := d.MustCtl("instance", "apply", "-f", specFile)
	checkLines(t, "second apply", r.stdout,
		regexp.QuoteMeta(fmt.Sprintf("instance web-1 applied (uuid %s, revision 2, metadata version 2)", uuid)),
		regexp.QuoteMeta("config drive: "+drive))
	md2 := mustGet(t, mdURL)
	checkLatestMetaData(t, "meta_data.json after second apply", md2, s)
	var seed1, seed2 struct {
		RandomSeed string `json:"random_seed"`
	}
	decodeJSON(t, string(md1), &seed1)
	decodeJSON(t, string(md2), &seed2)
	if seed1.RandomSeed == "" || seed1.RandomSeed == seed2.RandomSeed {
		t.Errorf("random_seed after re-apply: %.16q… then %.16q…, want a fresh non-empty seed per publish", seed1.RandomSeed, seed2.RandomSeed)
	}

	// Show, as JSON and as a table.
	showJSON := d.MustCtl("instance", "show", "web-1", "--output", "json").stdout
	decodeJSON(t, showJSON, &inst)
	checkInstance(t, "show --output json", inst, s, 2, 2, drive)

	table := d.MustCtl("instance", "show", "web-1").stdout
	checkLines(t, "show", table,
		`Name:\s+web-1`, `UUID:\s+`+uuid, `Hostname:\s+web-1`, `Project:\s+demo`, `Addresses:\s+127\.0\.0\.1`,
		`Revision:\s+2`, `Metadata version:\s+2`, `Config drive:\s+`+regexp.QuoteMeta(drive),
		`TYPE\s+BUS\s+ADDRESS\s+MAC/SERIAL/SHARE\s+TAGS\s+ENCRYPTED`,
		`nic\s+pci\s+0000:00:02\.0\s+52:54:00:12:34:56\s+nfvfunc1\s+-`,
		`nic\s+pci\s+0000:00:03\.0\s+52:54:00:12:34:57\s+nfvfunc2\s+-`,
		// --virt none creates no disk: "encrypted: true" in the spec is a
		// request, and the guest is told false (the untagged scratch disk
		// is then not listed at all).
		`disk\s+pci\s+0000:00:05\.0\s+squid-cache\s+squidcache\s+false`,
		`disk\s+scsi\s+0:0:0:1\s+oracle-data\s+oracledb\s+false`,
		`disk\s+scsi\s+0:0:1:0\s+backup-disk\s+backup\s+false`)
	// No share: under --virt none a share cannot be attached (shares.go's
	// tests attach them with libvirt).

	// List, as a table and as JSON, with --socket and with VMETA_SOCKET.
	checkLines(t, "list", d.MustCtl("instance", "list").stdout,
		`NAME\s+UUID\s+ADDRESSES\s+DISKS\s+NICS\s+SHARES\s+REVISION`,
		`web-1\s+`+uuid+`\s+127\.0\.0\.1\s+5\s+2\s+0\s+2`)
	listJSON := d.MustCtl("instance", "list", "--output", "json").stdout
	var list []instanceJSON
	decodeJSON(t, listJSON, &list)
	if len(list) != 1 {
		t.Fatalf("list --output json: %d instances, want 1:\n%s", len(list), listJSON)
	}
	checkInstance(t, "list --output json", list[0], s, 2, -1, drive)
	if r := hostctl(t, []string{"VMETA_SOCKET=" + d.Socket}, "instance", "list", "--output", "json"); r.code != 0 || r.stdout != listJSON {
		t.Errorf("list with VMETA_SOCKET instead of --socket: %s\nwant stdout:\n%s", r, listJSON)
	}

	// Restart on the same data directory: everything persisted, including
	// the published document (same random_seed: nothing is re-rendered).
	d = d.Restart()
	mdURL = d.URL() + "/openstack/latest/meta_data.json"
	if got := d.MustCtl("instance", "list", "--output", "json").stdout; got != listJSON {
		t.Errorf("list after restart:\n%s\nbefore:\n%s", got, listJSON)
	}
	if got := d.MustCtl("instance", "show", "web-1", "--output", "json").stdout; got != showJSON {
		t.Errorf("show after restart:\n%s\nbefore:\n%s", got, showJSON)
	}
	if got := mustGet(t, mdURL); !bytes.Equal(got, md2) {
		t.Errorf("meta_data.json after restart:\n%s\nbefore:\n%s", got, md2)
	}
	if _, err := os.Stat(drive); err != nil {
		t.Errorf("config drive after restart: %v", err)
	}

	// Delete.
	checkLines(t, "delete", d.MustCtl("instance", "delete", "web-1").stdout, `instance web-1 deleted`)
	for _, args := range [][]string{
		{"instance", "show", "web-1"},
		{"instance", "delete", "web-1"},
		{"configdrive", "build", "web-1", "-o", filepath.Join(t.TempDir(), "x.iso")},
	} {
		r := d.Ctl(args...)
		if r.code == 0 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("%s after delete: want a non-zero exit and \"not found\" on stderr; got %s", strings.Join(args, " "), r)
		}
	}
	if r := getFrom(t, "127.0.0.1", mdURL); r.status != http.StatusNotFound {
		t.Errorf("GET meta_data.json after delete: status %d, want 404; body %s", r.status, r.body)
	}
	if _, err := os.Stat(drive); !os.IsNotExist(err) {
		t.Errorf("config drive after delete: stat says %v, want it removed", err)
	}
	if _, err := os.Stat(filepath.Dir(drive)); !os.IsNotExist(err) {
		t.Errorf("instance directory after delete: stat says %v, want it removed", err)
	}
	if got := strings.TrimSpace(d.MustCtl("instance", "list", "--output", "json").stdout); got != "[]" {
		t.Errorf("list --output json after delete = %s, want []", got)
	}

	// The address is free again for another instance.
	other := strings.NewReplacer("name: web-1", "name: web-2", uuid, "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f").Replace(spec)
	d.Apply(other)
	if md := decodeMetaData(t, "meta_data.json of web-2", mustGet(t, mdURL)); md.UUID != "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f" {
		t.Errorf("meta_data.json from 127.0.0.1 after web-2 took the address: uuid %s", md.UUID)
	}
}

func TestRedisStore(t *testing.T) {
	t.Parallel()
	redisURL := testenv.StartRedis(t)
	const uuid = "4d3c2b1a-0f9e-4d8c-b7a6-958473625140"
	spec := webSpec(uuid)
	s := parseTestSpec(t, spec)
	d := startDaemon(t, daemonOptions{Store: redisURL})
	drive := filepath.Join(d.DataDir, "instances", "web-1", "disk.config")
	specFile := writeSpec(t, spec)

	var inst instanceJSON
	decodeJSON(t, d.MustCtl("instance", "apply", "-f", specFile, "--output", "json").stdout, &inst)
	checkInstance(t, "apply", inst, s, 1, 1, drive)
	decodeJSON(t, d.MustCtl("instance", "apply", "-f", specFile, "--output", "json").stdout, &inst)
	checkInstance(t, "re-apply", inst, s, 2, 2, drive)

	md := mustGet(t, d.URL()+"/openstack/latest/meta_data.json")
	checkLatestMetaData(t, "meta_data.json", md, s)
	if got := string(mustGet(t, d.URL()+"/latest/meta-data/hostname")); got != s.fqdn() {
		t.Errorf("GET /latest/meta-data/hostname = %q, want %q", got, s.fqdn())
	}
	if r := getFrom(t, "127.0.0.2", d.URL()+"/openstack/latest/meta_data.json"); r.status != http.StatusNotFound {
		t.Errorf("GET from 127.0.0.2: status %d, want 404", r.status)
	}

	// A second daemon on another data directory and the same Redis sees
	// the instance and serves the same document: the state is in Redis.
	d.Stop()
	d2 := startDaemon(t, daemonOptions{Store: redisURL})
	inst = instanceJSON{}
	decodeJSON(t, d2.MustCtl("instance", "show", "web-1", "--output", "json").stdout, &inst)
	checkInstance(t, "show from a daemon on a fresh data dir", inst, s, 2, 2, "")
	if got := mustGet(t, d2.URL()+"/openstack/latest/meta_data.json"); !bytes.Equal(got, md) {
		t.Errorf("meta_data.json from the second daemon:\n%s\nfirst daemon:\n%s", got, md)
	}

	d2.MustCtl("instance", "delete", "web-1")
	if r := getFrom(t, "127.0.0.1", d2.URL()+"/openstack/latest/meta_data.json"); r.status != http.StatusNotFound {
		t.Errorf("GET meta_data.json after delete: status %d, want 404", r.status)
	}
	if r := d2.Ctl("instance", "show", "web-1"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("show after delete: %s", r)
	}
}
