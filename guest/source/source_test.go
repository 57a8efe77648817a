package source_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/guest/internal/fixture"
	"github.com/vmeta/vmeta/guest/source"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/schema"
)

const goodDoc = `{"uuid": "8c3f6a0e-1b2c-4d5e-8f90-123456789abc", "hostname": "web", "devices": [
 {"type": "nic", "bus": "pci", "address": "0000:00:03.0", "mac": "52:54:00:12:34:56", "tags": ["nfvfunc1"], "vf_trusted": false},
 {"type": "disk", "bus": "scsi", "address": "0:0:2:0", "serial": "disk-vol-2352423", "tags": ["oracledb"], "encrypted": true},
 {"type": "disk", "bus": "pci", "address": "0000:00:07.0", "serial": "disk-vol-24235252", "tags": ["db/primary logs"]},
 {"type": "share", "bus": "none", "address": "none", "share_id": "4b5c6d7e-8f90-4a1b-9c2d-3e4f5a6b7c8d", "tag": "shared-data"}
]}`

func TestParse(t *testing.T) {
	doc, err := source.Parse([]byte(goodDoc))
	if err != nil {
		t.Fatal(err)
	}
	if doc.UUID != "8c3f6a0e-1b2c-4d5e-8f90-123456789abc" || len(doc.Devices) != 4 || doc.Digest == "" || len(doc.Ignored) != 0 {
		t.Fatalf("%+v", doc)
	}
	if d := doc.Devices[1]; d.Encrypted == nil || !*d.Encrypted || d.Tags[0] != "oracledb" {
		t.Errorf("disk: %+v", d)
	}
	if d := doc.Devices[3]; d.Tag != "shared-data" {
		t.Errorf("share: %+v", d)
	}
	// The digest covers the devices, not the rest of the document.
	other, err := source.Parse([]byte(strings.Replace(goodDoc, `"web"`, `"db"`, 1)))
	if err != nil || other.Digest != doc.Digest {
		t.Errorf("hostname change altered the digest: %v", err)
	}
	changed, _ := source.Parse([]byte(strings.Replace(goodDoc, `"nfvfunc1"`, `"nfvfunc9"`, 1)))
	if changed.Digest == doc.Digest {
		t.Error("tag change kept the digest")
	}
}

// A tagged pci device (schema 1.2) is accepted and kept apart: it is
// not matched or given udev rules, and not reported as ignored; the
// entries after it keep their place.
func TestParsePCI(t *testing.T) {
	doc, err := source.Parse([]byte(`{"devices": [
 {"type": "pci", "bus": "pci", "address": "0000:07:00.0", "tags": ["gpu"]},
 {"type": "nic", "bus": "pci", "address": "0000:01:00.0", "mac": "52:54:00:12:34:56", "tags": ["front"]},
 {"type": "pci", "bus": "pci", "address": "none", "tags": ["scratch"]}
]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Ignored) != 0 || len(doc.Devices) != 1 || doc.Devices[0].Type != "nic" {
		t.Fatalf("devices %+v, ignored %v", doc.Devices, doc.Ignored)
	}
	if len(doc.PCI) != 2 || doc.PCI[0].Address != "0000:07:00.0" || doc.PCI[0].Tags[0] != "gpu" || doc.PCI[1].Address != "none" {
		t.Fatalf("pci %+v", doc.PCI)
	}
}

func TestParseBadInput(t *testing.T) {
	cases := []struct {
		name, doc string
		want      string // substring of the error; "" means valid
		ignored   int
	}{
		{"no devices", `{"uuid": "x"}`, "", 0},
		{"devices null", `{"devices": null}`, "", 0},
		{"unknown type ignored", `{"devices": [{"type": "gpu", "bus": "pci", "address": "0000:00:09.0"}, {"type": "nic", "bus": "pci", "mac": "52:54:00:12:34:56"}]}`, "", 1},
		{"invalid entry after an ignored one keeps its index", `{"devices": [{"type": "gpu", "bus": "pci"}, {"type": "nic", "bus": "pci", "mac": "nope"}]}`, "/devices/1/mac", 0},
		{"nic without mac", `{"devices": [{"type": "nic", "bus": "pci"}]}`, `missing property "mac"`, 0},
		{"bad pci address", `{"devices": [{"type": "disk", "bus": "pci", "address": "00:07.0"}]}`, "does not match pattern", 0},
		{"tag not a string", `{"devices": [{"type": "disk", "bus": "pci", "tags": [7]}]}`, "/devices/0/tags/0", 0},
		{"type missing", `{"devices": [{"bus": "pci"}]}`, `missing property "type"`, 0},
		{"devices not a list", `{"devices": {"type": "nic"}}`, "not a list", 0},
		{"not an object", `[1, 2]`, "not a JSON object", 0},
		{"garbage", "<html>502 Bad Gateway</html>", "not a JSON object", 0},
		{"trailing data", `{"devices": []} {}`, "data after", 0},
		{"empty", ``, "not a JSON object", 0},
		{"pci untagged", `{"devices": [{"type": "pci", "bus": "pci", "address": "0000:07:00.0"}]}`, `missing property "tags"`, 0},
		{"pci host fields", `{"devices": [{"type": "pci", "bus": "pci", "address": "0000:07:00.0", "tags": ["gpu"], "one_time_use": true}]}`, "/devices/0/one_time_use", 0},
		{"share bad tag", `{"devices": [{"type": "share", "bus": "none", "address": "none", "share_id": "4b5c6d7e-8f90-4a1b-9c2d-3e4f5a6b7c8d", "tag": "a b"}]}`, "/devices/0/tag", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc, err := source.Parse([]byte(c.doc))
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(doc.Ignored) != c.ignored {
					t.Errorf("ignored %v", doc.Ignored)
				}
				return
			}
			if err == nil || !errors.Is(err, source.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrInvalid containing %q", err, c.want)
			}
		})
	}
	_, err := source.Parse([]byte(`{"devices": [{"type": "nic", "bus": "pci"}]}`))
	var se *schema.Error
	if !errors.As(err, &se) {
		t.Errorf("a schema violation is not a *schema.Error: %v", err)
	}
}

// FuzzParse: Parse never panics, refuses with ErrInvalid, and what it
// accepts holds only known device types with what the schema demands of
// them.
func FuzzParse(f *testing.F) {
	f.Add([]byte(goodDoc))
	f.Add([]byte(`{"devices": [{"type": "gpu"}]}`))
	f.Add([]byte(`{"devices": [{"type": "nic", "bus": "pci", "mac": "52:54:00:12:34:56", "tags": ["a\u0000b"]}]}`))
	f.Add([]byte(`{"devices": null}`))
	f.Add([]byte(`{"devices": [{"type": "pci", "bus": "pci", "address": "0000:07:00.0", "tags": ["gpu"]}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := source.Parse(data)
		if err != nil {
			if !errors.Is(err, source.ErrInvalid) {
				t.Fatalf("error not wrapping ErrInvalid: %v", err)
			}
			return
		}
		for i, d := range doc.Devices {
			switch {
			case d.Type == "nic" && d.MAC != "":
			case d.Type == "disk":
			case d.Type == "share" && d.Tag != "" && d.ShareID != "":
			default:
				t.Fatalf("accepted device %d: %+v", i, d)
			}
			if d.Bus == "" {
				t.Fatalf("accepted device %d without a bus: %+v", i, d)
			}
			for _, tag := range d.Tags {
				if tag == "" {
					t.Fatalf("accepted an empty tag: %+v", d)
				}
			}
		}
		for i, d := range doc.PCI {
			if d.Type != "pci" || d.Bus != "pci" || len(d.Tags) == 0 || d.Address == "" {
				t.Fatalf("accepted pci device %d: %+v", i, d)
			}
		}
		again, err := source.Parse(data)
		if err != nil || again.Digest != doc.Digest {
			t.Fatalf("second parse differs: %v", err)
		}
	})
}

func buildDrive(t *testing.T, p string, format configdrive.Format, label, metaData string) {
	t.Helper()
	files := []metadata.File{{Path: source.MetaDataPath, Data: []byte(metaData)}}
	if err := configdrive.Build(p, files, configdrive.Options{Format: format, Label: label}); err != nil {
		t.Fatal(err)
	}
}

func TestLabel(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		format configdrive.Format
		label  string
		fstype string
	}{
		{configdrive.ISO9660, "config-2", "iso9660"},
		{configdrive.VFAT, "CONFIG-2", "vfat"},
		{configdrive.ISO9660, "other", "iso9660"},
	} {
		p := filepath.Join(dir, string(c.format)+c.label)
		buildDrive(t, p, c.format, c.label, goodDoc)
		fh, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		fstype, label := source.Label(fh)
		fh.Close()
		if fstype != c.fstype || label != c.label {
			t.Errorf("%s %s: Label = %s %q", c.format, c.label, fstype, label)
		}
	}
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte(strings.Repeat("x", 70000)), 0o644)
	fh, _ := os.Open(junk)
	defer fh.Close()
	if fstype, label := source.Label(fh); fstype != "" || label != "" {
		t.Errorf("junk: %s %q", fstype, label)
	}
}

// TestConfigDriveByLabel finds the drive among the block devices of a
// fixture sysfs, whose device nodes are image files.
func TestConfigDriveByLabel(t *testing.T) {
	f := fixture.New(t)
	f.VirtioBlk([]string{"0000:00:07.0"}, 2, "vda", "root")
	f.ATA([]string{"0000:00:1f.2"}, 3, 3, 2, "sr0", "QM00005")
	f.VirtioBlk([]string{"0000:00:08.0"}, 3, "vdb", "")
	os.WriteFile(filepath.Join(f.Dev, "vda"), make([]byte, 1<<20), 0o644)
	buildDrive(t, filepath.Join(f.Dev, "vdb"), configdrive.VFAT, "CONFIG-2", `{"devices": []}`)
	buildDrive(t, filepath.Join(f.Dev, "sr0"), configdrive.ISO9660, "config-2", goodDoc)
	d := &source.ConfigDrive{SysRoot: f.Root, DevRoot: f.Dev}
	found, err := d.Find()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{f.Dev + "/sr0", f.Dev + "/vdb"}; strings.Join(found, " ") != strings.Join(want, " ") {
		t.Fatalf("Find = %v, want %v (cdrom first)", found, want)
	}
	doc, err := d.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if doc.Origin != "config drive "+f.Dev+"/sr0" || len(doc.Devices) != 4 {
		t.Errorf("%+v", doc)
	}
	// Without a drive.
	os.Remove(filepath.Join(f.Dev, "sr0"))
	os.WriteFile(filepath.Join(f.Dev, "vdb"), nil, 0o644)
	if _, err := d.Fetch(context.Background()); !errors.Is(err, source.ErrNoDrive) {
		t.Errorf("no drive: %v", err)
	}
}

func TestConfigDriveBad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.iso")
	buildDrive(t, good, configdrive.ISO9660, "config-2", goodDoc)
	img, _ := os.ReadFile(good)

	corrupt := filepath.Join(dir, "corrupt.iso")
	bad := append([]byte(nil), img...)
	// Keep the volume descriptor (so the label is found), wreck what
	// follows it: path tables and directories.
	for i := 16*2048 + 128; i < len(bad) && i < 16*2048+8192; i++ {
		bad[i] = 0xff
	}
	os.WriteFile(corrupt, bad, 0o644)

	truncated := filepath.Join(dir, "truncated.iso")
	os.WriteFile(truncated, img[:17*2048], 0o644)

	noMeta := filepath.Join(dir, "nometa.iso")
	if err := configdrive.Build(noMeta, []metadata.File{{Path: "openstack/2012-08-10/meta_data.json", Data: []byte("{}")}}, configdrive.Options{}); err != nil {
		t.Fatal(err)
	}
	invalid := filepath.Join(dir, "invalid.iso")
	buildDrive(t, invalid, configdrive.ISO9660, "config-2", `{"devices": [{"type": "nic"}]}`)

	for _, p := range []string{corrupt, truncated, noMeta, invalid, filepath.Join(dir, "missing")} {
		_, err := (&source.ConfigDrive{Path: p}).Fetch(context.Background())
		if err == nil {
			t.Errorf("%s: no error", filepath.Base(p))
			continue
		}
		t.Logf("%s: %v", filepath.Base(p), err)
	}
}

// metadataServer serves doc at openstack/latest/meta_data.json; fail
// answers before it: a status code, or -1 for garbage.
type metadataServer struct {
	doc        string
	fail       []int
	requireTok bool
	gets, puts atomic.Int32
}

func (m *metadataServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
		m.puts.Add(1)
		if r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
			http.Error(w, "ttl", http.StatusBadRequest)
			return
		}
		w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
		fmt.Fprint(w, "tok-123")
	case r.Method == http.MethodGet && r.URL.Path == "/openstack/latest/meta_data.json":
		n := int(m.gets.Add(1)) - 1
		if n < len(m.fail) {
			if m.fail[n] == -1 {
				fmt.Fprint(w, "<html>oops</html>")
				return
			}
			w.Header().Set("Retry-After", "0")
			http.Error(w, "fail", m.fail[n])
			return
		}
		if m.requireTok && r.Header.Get("X-aws-ec2-metadata-token") != "tok-123" {
			http.Error(w, "401 Unauthorized", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, m.doc)
	default:
		http.NotFound(w, r)
	}
}

func TestHTTP(t *testing.T) {
	ctx := context.Background()
	t.Run("ok", func(t *testing.T) {
		m := &metadataServer{doc: goodDoc}
		srv := httptest.NewServer(m)
		defer srv.Close()
		doc, err := (&source.HTTP{URLs: []string{srv.URL}}).Fetch(ctx)
		if err != nil || len(doc.Devices) != 4 || doc.Origin != srv.URL {
			t.Fatalf("%+v %v", doc, err)
		}
	})
	t.Run("500 then ok", func(t *testing.T) {
		m := &metadataServer{doc: goodDoc, fail: []int{500, 503}}
		srv := httptest.NewServer(m)
		defer srv.Close()
		doc, err := (&source.HTTP{URLs: []string{srv.URL}, Backoff: time.Millisecond}).Fetch(ctx)
		if err != nil || len(doc.Devices) != 4 || m.gets.Load() != 3 {
			t.Fatalf("%+v %v after %d GETs", doc, err, m.gets.Load())
		}
	})
	t.Run("500 always", func(t *testing.T) {
		m := &metadataServer{doc: goodDoc, fail: []int{500, 500, 500, 500}}
		srv := httptest.NewServer(m)
		defer srv.Close()
		_, err := (&source.HTTP{URLs: []string{srv.URL}, Backoff: time.Millisecond}).Fetch(ctx)
		if err == nil || !strings.Contains(err.Error(), "500") || m.gets.Load() != 3 {
			t.Fatalf("%v after %d GETs", err, m.gets.Load())
		}
	})
	t.Run("garbage is not retried", func(t *testing.T) {
		m := &metadataServer{doc: goodDoc, fail: []int{-1}}
		srv := httptest.NewServer(m)
		defer srv.Close()
		_, err := (&source.HTTP{URLs: []string{srv.URL}, Backoff: time.Millisecond}).Fetch(ctx)
		if !errors.Is(err, source.ErrInvalid) || m.gets.Load() != 1 {
			t.Fatalf("%v after %d GETs", err, m.gets.Load())
		}
	})
	t.Run("404", func(t *testing.T) {
		m := &metadataServer{doc: goodDoc, fail: []int{404}}
		srv := httptest.NewServer(m)
		defer srv.Close()
		_, err := (&source.HTTP{URLs: []string{srv.URL}, Backoff: time.Millisecond}).Fetch(ctx)
		if err == nil || m.gets.Load() != 1 {
			t.Fatalf("%v after %d GETs", err, m.gets.Load())
		}
	})
	t.Run("session token required", func(t *testing.T) {
		m := &metadataServer{doc: goodDoc, requireTok: true}
		srv := httptest.NewServer(m)
		defer srv.Close()
		h := &source.HTTP{URLs: []string{srv.URL}, Backoff: time.Millisecond}
		for range 3 {
			if _, err := h.Fetch(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// One token serves every read until it expires.
		if m.puts.Load() != 1 || m.gets.Load() != 4 {
			t.Errorf("%d PUTs, %d GETs; want 1 and 4", m.puts.Load(), m.gets.Load())
		}
	})
	t.Run("first URL down, second answers", func(t *testing.T) {
		m := &metadataServer{doc: goodDoc}
		srv := httptest.NewServer(m)
		defer srv.Close()
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		doc, err := (&source.HTTP{URLs: []string{dead.URL, srv.URL}, Backoff: time.Millisecond}).Fetch(ctx)
		if err != nil || doc.Origin != srv.URL {
			t.Fatalf("%+v %v", doc, err)
		}
	})
	t.Run("auto falls back to the service", func(t *testing.T) {
		m := &metadataServer{doc: goodDoc}
		srv := httptest.NewServer(m)
		defer srv.Close()
		f := fixture.New(t)
		a := &source.Auto{Drive: &source.ConfigDrive{SysRoot: f.Root, DevRoot: f.Dev}, HTTP: &source.HTTP{URLs: []string{srv.URL}}}
		doc, err := a.Fetch(ctx)
		if err != nil || doc.Origin != srv.URL {
			t.Fatalf("%+v %v", doc, err)
		}
	})
}

func TestDefaultURLs(t *testing.T) {
	u := source.DefaultURLs()
	if len(u) == 0 || u[0] != "http://169.254.169.254" {
		t.Fatalf("%v", u)
	}
	for _, x := range u[1:] {
		if !strings.HasPrefix(x, "http://[fe80::a9fe:a9fe%25") {
			t.Errorf("%s", x)
		}
	}
}
