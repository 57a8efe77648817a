package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

const (
	richUUID  = "3f0b5b9e-9c1e-4b8a-9d3e-2f6f2a7c1d01"
	richAddr  = "10.0.0.5:40000"
	keyData   = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGj8 demo@vmeta"
	userData  = "#cloud-config\nruncmd:\n  - echo hi\n"
	secretTag = "s3cr3t-user-data-marker"
)

// richInstance uses every feature that reaches the guest.
func richInstance(t testing.TB) *model.Instance {
	t.Helper()
	in := &model.Instance{
		Name:             "web-1",
		UUID:             richUUID,
		Hostname:         "web-1",
		ProjectID:        "demo",
		AvailabilityZone: "nova",
		Flavor:           "m1.small",
		Image:            "debian-12",
		Addresses:        []string{"10.0.0.5", "127.0.0.1", "::1"},
		Meta:             map[string]string{"role": "web"},
		PublicKeys:       []model.PublicKey{{Name: "demo", Data: keyData}},
		UserData:         userData + "# " + secretTag + "\n",
		VendorData:       map[string]any{"cloud-init": "#cloud-config\n{}"},
		Files:            []model.File{{Path: "/etc/motd", Content: "hello\n"}},
		DedicatedCPUs:    []int{2, 3},
		Disks: []model.Disk{
			{Name: "vda", Bus: "virtio", Address: "0000:00:04.0", Serial: "root"},
			{Name: "vdb", Bus: "virtio", Address: "0000:00:05.0", Serial: "data", Tag: "data", Encrypted: true},
		},
		NICs: []model.NIC{
			{MAC: "52:54:00:12:34:56", Address: "0000:00:02.0", Tag: "eth", MTU: 1500,
				IPs: []model.IPConfig{{Address: "10.0.0.5/24", Gateway: "10.0.0.1", DNS: []string{"10.0.0.1"}}}},
			{MAC: "52:54:00:12:34:57", Address: "0000:00:03.0", VLAN: intp(100)},
		},
		Shares: []model.Share{{ShareID: "7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99"}},
	}
	in.Normalize()
	if err := in.Validate(); err != nil {
		t.Fatalf("richInstance: %v", err)
	}
	return in
}

func intp(i int) *int { return &i }

func at(day string) func() time.Time {
	tm, err := time.Parse("2006-01-02", day)
	if err != nil {
		panic(err)
	}
	return func() time.Time { return tm.Add(12 * time.Hour) }
}

// setup returns a server over a fake holding the rich instance.
func setup(t testing.TB, now string) (*Server, *fakeDocs, *metadata.Tree) {
	t.Helper()
	docs := newFakeDocs()
	tr := docs.publish(t, richInstance(t))
	return New(docs, testOptions(at(now))), docs, tr
}

type response struct {
	status int
	ctype  string
	header http.Header
	body   string
}

func do(h http.Handler, method, target, remote string) response {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, ctype: res.Header.Get("Content-Type"), header: res.Header, body: string(b)}
}

func get(h http.Handler, target string) response { return do(h, http.MethodGet, target, richAddr) }

func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "invalid(" + ct + ")"
	}
	return mt
}

const (
	textPlain = "text/plain"
	appJSON   = "application/json"
)

func TestRouting(t *testing.T) {
	s, _, tr := setup(t, "2020-01-01")
	file := func(p string) string {
		b, ok := tr.Get(p)
		if !ok {
			t.Fatalf("tree has no %s", p)
		}
		return string(b)
	}
	ec2Listing := "1.0\n2007-01-19\n2007-03-01\n2007-08-29\n2007-10-10\n2007-12-15\n2008-02-01\n2008-09-01\n2009-04-04\nlatest"
	osListing2020 := "2012-08-10\n2013-04-04\n2013-10-17\n2015-10-15\n2016-06-30\n2016-10-06\n2017-02-22\n2018-08-27\nlatest"
	metaDataListing := strings.Join([]string{
		"ami-id", "ami-launch-index", "ami-manifest-path", "block-device-mapping/", "hostname",
		"instance-action", "instance-id", "instance-type", "local-hostname", "local-ipv4", "placement/",
		"public-hostname", "public-ipv4", "public-keys/", "reservation-id", "security-groups",
	}, "\n")

	const unknown = "192.0.2.99:1234"
	tests := []struct {
		name   string
		method string
		target string
		remote string
		status int
		ctype  string // media type; "" = don't care
		body   *string
	}{
		{name: "root lists EC2 versions", target: "/", status: 200, ctype: textPlain, body: &ec2Listing},
		{name: "root from an unknown address", target: "/", remote: unknown, status: 200, ctype: textPlain, body: &ec2Listing},
		{name: "root from a garbage address", target: "/", remote: "not-an-address", status: 200, body: &ec2Listing},
		{name: "openstack listing hides future versions", target: "/openstack", status: 200, ctype: textPlain, body: &osListing2020},
		{name: "openstack/ listing", target: "/openstack/", status: 200, ctype: textPlain, body: &osListing2020},
		{name: "future version still served", target: "/openstack/2025-04-04/meta_data.json", status: 200, ctype: appJSON, body: ptr(file("openstack/2025-04-04/meta_data.json"))},
		{name: "hidden 2020-10-14 still served", target: "/openstack/2020-10-14/meta_data.json", status: 200, ctype: appJSON, body: ptr(file("openstack/2020-10-14/meta_data.json"))},
		{name: "latest listing", target: "/openstack/latest", status: 200, ctype: textPlain,
			body: ptr("meta_data.json\nuser_data\npassword\nvendor_data.json\nnetwork_data.json\nvendor_data2.json")},
		{name: "latest/ listing", target: "/openstack/latest/", status: 200, ctype: textPlain,
			body: ptr("meta_data.json\nuser_data\npassword\nvendor_data.json\nnetwork_data.json\nvendor_data2.json")},
		{name: "folsom listing", target: "/openstack/2012-08-10", status: 200, ctype: textPlain, body: ptr("meta_data.json\nuser_data")},
		{name: "grizzly listing", target: "/openstack/2013-04-04", status: 200, body: ptr("meta_data.json\nuser_data\npassword")},
		{name: "havana listing", target: "/openstack/2013-10-17", status: 200, body: ptr("meta_data.json\nuser_data\npassword\nvendor_data.json")},
		{name: "liberty listing", target: "/openstack/2015-10-15", status: 200, body: ptr("meta_data.json\nuser_data\npassword\nvendor_data.json\nnetwork_data.json")},
		{name: "folsom vendor_data 404", target: "/openstack/2012-08-10/vendor_data.json", status: 404},
		{name: "folsom password 404", target: "/openstack/2012-08-10/password", status: 404},
		{name: "havana vendor_data2 404", target: "/openstack/2013-10-17/vendor_data2.json", status: 404},
		{name: "grizzly password empty", target: "/openstack/2013-04-04/password", status: 200, ctype: textPlain, body: ptr("")},
		{name: "meta_data.json", target: "/openstack/latest/meta_data.json", status: 200, ctype: appJSON, body: ptr(file("openstack/latest/meta_data.json"))},
		{name: "user_data", target: "/openstack/latest/user_data", status: 200, ctype: textPlain, body: ptr(file("openstack/latest/user_data"))},
		{name: "vendor_data.json", target: "/openstack/latest/vendor_data.json", status: 200, ctype: appJSON, body: ptr(file("openstack/latest/vendor_data.json"))},
		{name: "vendor_data2.json", target: "/openstack/latest/vendor_data2.json", status: 200, ctype: appJSON, body: ptr(file("openstack/latest/vendor_data2.json"))},
		{name: "network_data.json is text/plain", target: "/openstack/latest/network_data.json", status: 200, ctype: textPlain, body: ptr(file("openstack/latest/network_data.json"))},
		{name: "old meta_data.json", target: "/openstack/2012-08-10/meta_data.json", status: 200, ctype: appJSON, body: ptr(file("openstack/2012-08-10/meta_data.json"))},
		{name: "content listing 404", target: "/openstack/content", status: 404},
		{name: "content/ listing 404", target: "/openstack/content/", status: 404},
		// Injected files are config-drive only, as in Nova.
		{name: "content blob is drive-only", target: "/openstack/content/0000", status: 404},
		{name: "network_data.json of a version that does not list it", target: "/openstack/2012-08-10/network_data.json", status: 200, ctype: textPlain, body: ptr(file("openstack/latest/network_data.json"))},
		{name: "missing content blob", target: "/openstack/content/0001", status: 404},
		{name: "unknown openstack version", target: "/openstack/1999-01-01/meta_data.json", status: 404},
		{name: "unknown openstack version listing", target: "/openstack/1999-01-01", status: 404},
		{name: "unknown openstack file", target: "/openstack/latest/nope.json", status: 404},
		{name: "ec2 meta-data listing", target: "/latest/meta-data/", status: 200, ctype: textPlain, body: &metaDataListing},
		{name: "ec2 meta-data listing no slash", target: "/2009-04-04/meta-data", status: 200, body: &metaDataListing},
		{name: "ec2 prefix meta-data listing", target: "/ec2/latest/meta-data", status: 200, body: &metaDataListing},
		{name: "public-keys", target: "/2009-04-04/meta-data/public-keys", status: 200, ctype: textPlain, body: ptr("0=demo")},
		{name: "public-keys/0", target: "/2009-04-04/meta-data/public-keys/0", status: 200, body: ptr("openssh-key")},
		{name: "public-keys/0/", target: "/2009-04-04/meta-data/public-keys/0/", status: 200, body: ptr("openssh-key")},
		{name: "openssh-key", target: "/2009-04-04/meta-data/public-keys/0/openssh-key", status: 200, ctype: textPlain, body: ptr(keyData)},
		{name: "no _name path", target: "/2009-04-04/meta-data/public-keys/0/_name", status: 404},
		{name: "public-keys/1 404", target: "/2009-04-04/meta-data/public-keys/1", status: 404},
		{name: "hostname", target: "/2009-04-04/meta-data/hostname", status: 200, ctype: textPlain, body: ptr("web-1.novalocal")},
		{name: "ec2/ hostname", target: "/ec2/2009-04-04/meta-data/hostname", status: 200, body: ptr("web-1.novalocal")},
		{name: "latest hostname//", target: "/latest/meta-data/hostname//", status: 200, body: ptr("web-1.novalocal")},
		{name: "placement listing", target: "/latest/meta-data/placement", status: 200, body: ptr("availability-zone")},
		{name: "placement az", target: "/latest/meta-data/placement/availability-zone", status: 200, body: ptr("nova")},
		{name: "block-device-mapping", target: "/latest/meta-data/block-device-mapping", status: 200, body: ptr("ami\nebs0\nroot")},
		{name: "block-device-mapping root", target: "/latest/meta-data/block-device-mapping/root", status: 200, body: ptr("/dev/vda")},
		{name: "ami-launch-index", target: "/latest/meta-data/ami-launch-index", status: 200, body: ptr("0")},
		{name: "security-groups", target: "/latest/meta-data/security-groups", status: 200, body: ptr("default")},
		{name: "local-ipv4", target: "/latest/meta-data/local-ipv4", status: 200, body: ptr("10.0.0.5")},
		{name: "public-ipv4 empty", target: "/latest/meta-data/public-ipv4", status: 200, body: ptr("")},
		{name: "instance-action", target: "/latest/meta-data/instance-action", status: 200, body: ptr("none")},
		{name: "1.0 meta-data has no local-hostname", target: "/1.0/meta-data/", status: 200,
			body: ptr("ami-id\nami-launch-index\nami-manifest-path\nhostname\ninstance-id\nlocal-ipv4\npublic-keys/\nreservation-id\nsecurity-groups")},
		{name: "1.0 local-hostname 404", target: "/1.0/meta-data/local-hostname", status: 404},
		{name: "2008-02-01 has no instance-action", target: "/2008-02-01/meta-data/instance-action", status: 404},
		{name: "ec2 user-data", target: "/2009-04-04/user-data", status: 200, ctype: textPlain, body: ptr(file("ec2/2009-04-04/user-data"))},
		{name: "ec2 version listing", target: "/2009-04-04", status: 200, ctype: textPlain, body: ptr("meta-data/\nuser-data")},
		{name: "ec2 version listing slash", target: "/2009-04-04/", status: 200, body: ptr("meta-data/\nuser-data")},
		{name: "ec2 1.0 listing", target: "/1.0", status: 200, body: ptr("meta-data/\nuser-data")},
		{name: "ec2 unknown version", target: "/2010-01-01/meta-data/hostname", status: 404},
		{name: "ec2 unknown key", target: "/latest/meta-data/nope", status: 404},
		{name: "ec2 below a leaf", target: "/latest/meta-data/hostname/x", status: 404},
		{name: "dot-dot inside openstack", target: "/openstack/latest/../latest/./meta_data.json", status: 200, ctype: appJSON, body: ptr(file("openstack/latest/meta_data.json"))},
		{name: "dot-dot escaping root", target: "/../../etc/passwd", status: 404},
		{name: "double slashes", target: "/openstack//latest///meta_data.json", status: 200, ctype: appJSON, body: ptr(file("openstack/latest/meta_data.json"))},
		{name: "query string ignored", target: "/openstack/latest/meta_data.json?x=1", status: 200, ctype: appJSON, body: ptr(file("openstack/latest/meta_data.json"))},
		{name: "percent-encoded path", target: "/openstack/latest/meta%5Fdata.json", status: 200, ctype: appJSON, body: ptr(file("openstack/latest/meta_data.json"))},
		{name: "unknown source address", target: "/openstack/latest/meta_data.json", remote: unknown, status: 404},
		{name: "unknown source address listing", target: "/openstack", remote: unknown, status: 404},
		{name: "unparsable source address", target: "/latest/meta-data/hostname", remote: "garbage", status: 404},
		{name: "IPv6 source", target: "/latest/meta-data/hostname", remote: "[::1]:1234", status: 200, body: ptr("web-1.novalocal")},
		{name: "IPv4-mapped IPv6 source", target: "/latest/meta-data/hostname", remote: "[::ffff:127.0.0.1]:1", status: 200, body: ptr("web-1.novalocal")},
		{name: "IPv6 source with zone", target: "/latest/meta-data/hostname", remote: "[::1%lo]:1", status: 200, body: ptr("web-1.novalocal")},
		{name: "source without port", target: "/latest/meta-data/hostname", remote: "10.0.0.5", status: 200, body: ptr("web-1.novalocal")},
		{name: "POST refused", method: http.MethodPost, target: "/openstack/latest/meta_data.json", status: 405},
		{name: "PUT refused", method: http.MethodPut, target: "/", status: 405},
		{name: "DELETE refused", method: http.MethodDelete, target: "/latest/meta-data/hostname", status: 405},
		{name: "HEAD file", method: http.MethodHead, target: "/openstack/latest/meta_data.json", status: 200, ctype: appJSON, body: ptr("")},
		{name: "HEAD root", method: http.MethodHead, target: "/", status: 200, ctype: textPlain, body: ptr("")},
		{name: "HEAD missing", method: http.MethodHead, target: "/openstack/latest/nope", status: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method, remote := tc.method, tc.remote
			if method == "" {
				method = http.MethodGet
			}
			if remote == "" {
				remote = richAddr
			}
			res := do(s, method, tc.target, remote)
			if res.status != tc.status {
				t.Fatalf("%s %s from %s: status %d, want %d (body %q)", method, tc.target, remote, res.status, tc.status, res.body)
			}
			if tc.ctype != "" && mediaType(res.ctype) != tc.ctype {
				t.Errorf("Content-Type = %q, want %s", res.ctype, tc.ctype)
			}
			if tc.body != nil && res.body != *tc.body {
				t.Errorf("body =\n%q\nwant\n%q", res.body, *tc.body)
			}
			if res.status == 405 && res.header.Get("Allow") != "GET, HEAD" {
				t.Errorf("405 without Allow: GET, HEAD (got %q)", res.header.Get("Allow"))
			}
			if res.status >= 400 && strings.Contains(res.body, secretTag) {
				t.Errorf("error body leaks document content: %q", res.body)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestEquivalentPaths(t *testing.T) {
	s, _, _ := setup(t, "2026-01-01")
	groups := [][]string{
		{"/ec2/2009-04-04/meta-data/hostname", "/2009-04-04/meta-data/hostname", "/latest/meta-data/hostname//", "/ec2/latest/meta-data/hostname/", "/latest//meta-data/./hostname"},
		{"/openstack/latest/meta_data.json", "/openstack/2025-04-04/meta_data.json", "/openstack/latest/meta_data.json/", "/openstack/./latest/x/../meta_data.json"},
		{"/latest/user-data", "/2009-04-04/user-data", "/ec2/latest/user-data"},
	}
	for _, g := range groups {
		first := get(s, g[0])
		if first.status != 200 {
			t.Fatalf("%s: %d", g[0], first.status)
		}
		for _, p := range g[1:] {
			if r := get(s, p); r.status != 200 || r.body != first.body || r.ctype != first.ctype {
				t.Errorf("%s = %d %q %q, want the same as %s (%q %q)", p, r.status, r.ctype, r.body, g[0], first.ctype, first.body)
			}
		}
	}
}

func TestOpenStackListingByDate(t *testing.T) {
	all := strings.Join(append(append([]string(nil), metadata.OpenStackVersions...), "latest"), "\n")
	for _, tc := range []struct{ now, want string }{
		{"2026-01-01", all},
		{"2025-04-04", all}, // a version dated today is listed
		{"2025-04-03", strings.Join(append(append([]string(nil), metadata.OpenStackVersions[:len(metadata.OpenStackVersions)-1]...), "latest"), "\n")},
		{"2020-01-01", "2012-08-10\n2013-04-04\n2013-10-17\n2015-10-15\n2016-06-30\n2016-10-06\n2017-02-22\n2018-08-27\nlatest"},
		{"2000-01-01", "latest"},
	} {
		s, _, _ := setup(t, tc.now)
		if r := get(s, "/openstack"); r.status != 200 || r.body != tc.want {
			t.Errorf("now %s: /openstack = %d %q, want %q", tc.now, r.status, r.body, tc.want)
		}
	}
	// The date is taken in UTC.
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	east := time.FixedZone("UTC+14", 14*3600)
	s := New(docs, Options{Logger: quietLogger(), Now: func() time.Time { return time.Date(2025, 4, 4, 8, 0, 0, 0, east) }}) // 2025-04-03 18:00 UTC
	if r := get(s, "/openstack"); strings.Contains(r.body, "2025-04-04") {
		t.Errorf("listing uses local date instead of UTC: %q", r.body)
	}
	// Default clock: today's listing includes 2025-04-04.
	s = New(docs, Options{Logger: quietLogger()})
	if r := get(s, "/openstack"); r.status != 200 || r.body != all {
		t.Errorf("default clock: /openstack = %q, want %q", r.body, all)
	}
}

func TestNoUserData(t *testing.T) {
	docs := newFakeDocs()
	in := richInstance(t)
	in.UserData = ""
	docs.publish(t, in)
	s := New(docs, Options{Logger: quietLogger(), Now: at("2026-01-01")})
	for target, want := range map[string]response{
		"/openstack/latest":           {status: 200, body: "meta_data.json\npassword\nvendor_data.json\nnetwork_data.json\nvendor_data2.json"},
		"/openstack/2012-08-10":       {status: 200, body: "meta_data.json"},
		"/openstack/latest/user_data": {status: 404},
		"/latest/user-data":           {status: 404},
		"/latest":                     {status: 200, body: "meta-data/"},
	} {
		r := get(s, target)
		if r.status != want.status || (want.status == 200 && r.body != want.body) {
			t.Errorf("%s = %d %q, want %d %q", target, r.status, r.body, want.status, want.body)
		}
	}
}

func TestMultipleKeys(t *testing.T) {
	docs := newFakeDocs()
	in := richInstance(t)
	in.PublicKeys = append(in.PublicKeys, model.PublicKey{Name: "second", Data: "ssh-rsa BBBB second"})
	docs.publish(t, in)
	s := New(docs, Options{Logger: quietLogger()})
	for target, want := range map[string]string{
		"/latest/meta-data/public-keys":               "0=demo\n1=second",
		"/latest/meta-data/public-keys/1":             "openssh-key",
		"/latest/meta-data/public-keys/1/openssh-key": "ssh-rsa BBBB second",
	} {
		if r := get(s, target); r.status != 200 || r.body != want {
			t.Errorf("%s = %d %q, want %q", target, r.status, r.body, want)
		}
	}
	// Without keys there is no public-keys entry at all.
	docs2 := newFakeDocs()
	in2 := richInstance(t)
	in2.PublicKeys = nil
	docs2.publish(t, in2)
	s2 := New(docs2, Options{Logger: quietLogger()})
	if r := get(s2, "/latest/meta-data/public-keys"); r.status != 404 {
		t.Errorf("public-keys without keys: %d", r.status)
	}
	if r := get(s2, "/latest/meta-data/"); strings.Contains(r.body, "public-keys") {
		t.Errorf("meta-data listing mentions public-keys without keys: %q", r.body)
	}
}

// storeTree stores a hand-edited tree for the rich instance.
func storeTree(t *testing.T, docs *fakeDocs, tr *metadata.Tree) {
	t.Helper()
	enc, err := tr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	docs.mu.Lock()
	defer docs.mu.Unlock()
	d := docs.docs[richUUID]
	d.Version++
	d.Tree = enc
	docs.docs[richUUID] = d
}

// TestEC2ValueRendering checks ec2_md_print's rendering of every JSON
// value type: Python's str() of None, True and False, integers without a
// decimal point, lists one item per line.
func TestEC2ValueRendering(t *testing.T) {
	docs := newFakeDocs()
	tr := docs.publish(t, richInstance(t))
	var md map[string]any
	if err := json.Unmarshal(tr.Files["ec2/latest/meta-data.json"], &md); err != nil {
		t.Fatal(err)
	}
	md["x-null"], md["x-true"], md["x-false"], md["x-int"], md["x-float"] = nil, true, false, 42, 1.5
	md["x-list"] = []any{"a", "b"}
	md["x-empty"] = map[string]any{}
	b, err := json.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	tr.Files["ec2/latest/meta-data.json"] = b
	storeTree(t, docs, tr)
	s := New(docs, Options{Logger: quietLogger()})
	for target, want := range map[string]string{
		"/latest/meta-data/x-null":  "None",
		"/latest/meta-data/x-true":  "True",
		"/latest/meta-data/x-false": "False",
		"/latest/meta-data/x-int":   "42",
		"/latest/meta-data/x-float": "1.5",
		"/latest/meta-data/x-list":  "a\nb",
		"/latest/meta-data/x-empty": "",
	} {
		if r := get(s, target); r.status != 200 || r.body != want {
			t.Errorf("%s = %d %q, want %q", target, r.status, r.body, want)
		}
	}
	if r := get(s, "/latest/meta-data/"); !strings.Contains(r.body, "\nx-empty/\nx-false\n") {
		t.Errorf("listing: %q", r.body)
	}
}

// TestIncompleteTree: a tree missing a version the server must serve is
// refused with 500 rather than served partially.
func TestIncompleteTree(t *testing.T) {
	for _, missing := range []string{"ec2/1.0/meta-data.json", "openstack/2013-04-04/meta_data.json"} {
		docs := newFakeDocs()
		tr := docs.publish(t, richInstance(t))
		delete(tr.Files, missing)
		storeTree(t, docs, tr)
		s := New(docs, Options{Logger: quietLogger()})
		if r := get(s, "/latest/meta-data/hostname"); r.status != 500 {
			t.Errorf("tree without %s: %d %q", missing, r.status, r.body)
		}
	}
	docs := newFakeDocs()
	tr := docs.publish(t, richInstance(t))
	tr.Files["ec2/2009-04-04/meta-data.json"] = []byte("[1,2]")
	storeTree(t, docs, tr)
	if r := get(New(docs, Options{Logger: quietLogger()}), "/"+"latest/meta-data/hostname"); r.status != 500 {
		t.Errorf("tree with a non-object meta-data.json: %d", r.status)
	}
}

func TestInvalidate(t *testing.T) {
	s, docs, _ := setup(t, "2026-01-01")
	const target = "/latest/meta-data/hostname"
	if r := get(s, target); r.body != "web-1.novalocal" {
		t.Fatalf("before: %q", r.body)
	}
	lookups := docs.lookups.Load()
	// Cached: a second request does not reach the store.
	get(s, target)
	get(s, "/openstack/latest/meta_data.json")
	if got := docs.lookups.Load(); got != lookups {
		t.Errorf("cached requests hit the store: %d lookups, want %d", got, lookups)
	}

	in := richInstance(t)
	in.Hostname = "web-2"
	docs.publish(t, in)
	// Documented first-cut behaviour: the cached view is served until
	// Invalidate.
	if r := get(s, target); r.body != "web-1.novalocal" {
		t.Errorf("without Invalidate: %q, want the cached web-1.novalocal", r.body)
	}
	s.Invalidate(in.UUID)
	if r := get(s, target); r.body != "web-2.novalocal" {
		t.Errorf("after Invalidate: %q, want web-2.novalocal", r.body)
	}
	if r := get(s, "/openstack/latest/meta_data.json"); !strings.Contains(r.body, `"hostname":"web-2.novalocal"`) {
		t.Errorf("meta_data.json after Invalidate: %s", r.body)
	}

	// An instance that is gone: 404 after Invalidate.
	docs.mu.Lock()
	delete(docs.addrs, "10.0.0.5")
	docs.mu.Unlock()
	s.Invalidate(in.UUID)
	if r := get(s, target); r.status != 404 {
		t.Errorf("after delete: %d", r.status)
	}
	// Other addresses of the instance still work.
	if r := do(s, http.MethodGet, target, "127.0.0.1:9"); r.status != 200 {
		t.Errorf("other address after delete of one: %d", r.status)
	}
}

// TestInvalidateDuringFill holds a request between reading the old document
// and caching its view, publishes and invalidates meanwhile, and checks that
// the stale view is not cached.
func TestInvalidateDuringFill(t *testing.T) {
	s, docs, _ := setup(t, "2026-01-01")
	const target = "/latest/meta-data/hostname"
	entered, release := make(chan struct{}), make(chan struct{})
	docs.mu.Lock()
	docs.afterFetch = func() { close(entered); <-release }
	docs.mu.Unlock()

	inflight := make(chan response)
	go func() { inflight <- get(s, target) }()
	<-entered
	in := richInstance(t)
	in.Hostname = "web-2"
	docs.publish(t, in)
	s.Invalidate(in.UUID)
	close(release)
	if r := <-inflight; r.body != "web-1.novalocal" {
		t.Errorf("in-flight request: %q, want the document it read (web-1.novalocal)", r.body)
	}
	if r := get(s, target); r.body != "web-2.novalocal" {
		t.Errorf("after Invalidate during a fill: %q, want web-2.novalocal (a stale view was cached)", r.body)
	}
}

func TestStoreErrors(t *testing.T) {
	secretErr := errors.New("backend exploded: " + secretTag)
	for _, tc := range []struct {
		name   string
		break_ func(f *fakeDocs)
		status int
	}{
		// An error from the store (other than not found) means it is
		// unreachable: 503, and nothing cached to fall back on.
		{"lookup error", func(f *fakeDocs) { f.lookErr = secretErr }, 503},
		{"document error", func(f *fakeDocs) { f.docErr = secretErr }, 503},
		{"wrapped not found from document", func(f *fakeDocs) { f.docErr = fmt.Errorf("gone: %w", store.ErrNotFound) }, 404},
		{"corrupt tree", func(f *fakeDocs) {
			d := f.docs[richUUID]
			d.Tree = append([]byte(`{"files":{"x":"`+secretTag), d.Tree...)
			f.docs[richUUID] = d
		}, 500},
		{"tree without meta_data.json", func(f *fakeDocs) {
			d := f.docs[richUUID]
			d.Tree = []byte(`{"files":{"ec2/latest/user-data":"` + secretTag + `"}}`)
			f.docs[richUUID] = d
		}, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs := newFakeDocs()
			docs.publish(t, richInstance(t))
			var logs bytes.Buffer
			s := New(docs, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: at("2026-01-01")})
			docs.mu.Lock()
			tc.break_(docs)
			docs.mu.Unlock()
			for _, target := range []string{"/openstack/latest/user_data", "/latest/user-data", "/openstack"} {
				r := get(s, target)
				if r.status != tc.status {
					t.Errorf("%s: status %d, want %d", target, r.status, tc.status)
				}
				if strings.Contains(r.body, secretTag) || strings.Contains(r.body, "exploded") || strings.Contains(r.body, "cloud-config") {
					t.Errorf("%s: body leaks content: %q", target, r.body)
				}
			}
			if tc.status == 500 && !strings.Contains(logs.String(), "metadata document cannot be served") {
				t.Errorf("500 not logged: %q", logs.String())
			}
			if tc.status == 503 && !strings.Contains(logs.String(), "metadata store unreachable") {
				t.Errorf("store error not logged: %q", logs.String())
			}
			// "/" needs no lookup and keeps working.
			if r := get(s, "/"); r.status != 200 {
				t.Errorf("/ during store failure: %d", r.status)
			}
			// Errors are not cached: once the store recovers, the guest is served.
			docs.mu.Lock()
			docs.lookErr, docs.docErr = nil, nil
			docs.mu.Unlock()
			docs.publish(t, richInstance(t))
			if r := get(s, "/openstack/latest/user_data"); r.status != 200 || !strings.Contains(r.body, secretTag) {
				t.Errorf("after recovery: %d %q", r.status, r.body)
			}
		})
	}
}

func TestConcurrentRequests(t *testing.T) {
	s, docs, tr := setup(t, "2026-01-01")
	type want struct{ target, remote, body string }
	wants := []want{
		{"/openstack/latest/meta_data.json", "10.0.0.5:1", string(tr.Files["openstack/latest/meta_data.json"])},
		{"/latest/meta-data/hostname", "[::1]:2", "web-1.novalocal"},
		{"/2009-04-04/meta-data/public-keys/0/openssh-key", "127.0.0.1:3", keyData},
		{"/openstack/latest/network_data.json", "[::ffff:10.0.0.5]:4", string(tr.Files["openstack/latest/network_data.json"])},
		{"/", "192.0.2.1:5", strings.Join(append(append([]string(nil), metadata.EC2Versions...), "latest"), "\n")},
	}
	const goroutines, requests = 32, 200
	var failures atomic.Int64
	stop := make(chan struct{})
	var invalidator sync.WaitGroup
	invalidator.Add(1)
	go func() {
		defer invalidator.Done()
		// Each Invalidate makes the next requests rebuild views, which is
		// slow under -race: bound the number of invalidations.
		for range 200 {
			select {
			case <-stop:
				return
			default:
				s.Invalidate(richUUID)
				time.Sleep(2 * time.Millisecond)
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range requests {
				w := wants[(g+i)%len(wants)]
				r := do(s, http.MethodGet, w.target, w.remote)
				if r.status != 200 || r.body != w.body {
					if failures.Add(1) <= 5 {
						t.Errorf("%s from %s: %d %q", w.target, w.remote, r.status, r.body)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	invalidator.Wait()
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d requests failed", n, goroutines*requests)
	}
	t.Logf("%d requests, %d document fetches", goroutines*requests, docs.fetches.Load())
}

func TestNormalizePath(t *testing.T) {
	for in, want := range map[string]string{
		"":                                 "ec2",
		"/":                                "ec2",
		"//":                               "ec2",
		"/..":                              "ec2",
		"/ec2":                             "ec2",
		"/ec2/":                            "ec2",
		"/openstack":                       "openstack",
		"/openstack/":                      "openstack",
		"openstack/latest":                 "openstack/latest",
		"/latest/meta-data/":               "ec2/latest/meta-data",
		"/ec2/latest/meta-data":            "ec2/latest/meta-data",
		"/openstack/latest/../latest/./x":  "openstack/latest/x",
		"/../../etc/passwd":                "ec2/etc/passwd",
		"/openstack/../etc":                "ec2/etc",
		"/a..b/c":                          "ec2/a..b/c",
		"/ec2x":                            "ec2/ec2x",
		"/OpenStack/latest":                "ec2/OpenStack/latest",
		"/latest/meta-data/hostname//":     "ec2/latest/meta-data/hostname",
		"/openstack//latest///meta_data.j": "openstack/latest/meta_data.j",
	} {
		if got := NormalizePath(in); got != want {
			t.Errorf("NormalizePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzNormalizePath checks the invariants of NormalizePath: it never
// panics; its result is non-empty, relative, without empty, "." or ".."
// segments or a trailing slash; it starts with the ec2 or openstack
// segment; and normalizing it again (with or without a leading slash)
// changes nothing. The result may contain ".." inside a segment ("a..b"),
// which is harmless: it is a map key, never a file system path.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"", "/", "//", "/..", "/ec2", "/openstack/", "/latest/meta-data/",
		"/openstack/latest/../latest/./meta_data.json", "/../../etc/passwd", "/a..b", "/./.././/ec2//x/",
		"ec2", "openstack/..", "/ec2/../openstack", "\x00/..\xff", "/...", "/.../..", "ec2/ec2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		r := NormalizePath(p)
		if r == "" {
			t.Fatalf("NormalizePath(%q) is empty", p)
		}
		if strings.HasPrefix(r, "/") || strings.HasSuffix(r, "/") {
			t.Fatalf("NormalizePath(%q) = %q has a leading or trailing slash", p, r)
		}
		if strings.Contains(r, "//") || strings.Contains(r, "/./") {
			t.Fatalf("NormalizePath(%q) = %q has // or /./", p, r)
		}
		segs := strings.Split(r, "/")
		for _, s := range segs {
			if s == "" || s == "." || s == ".." {
				t.Fatalf("NormalizePath(%q) = %q has segment %q", p, r, s)
			}
		}
		if segs[0] != "ec2" && segs[0] != "openstack" {
			t.Fatalf("NormalizePath(%q) = %q does not start with ec2 or openstack", p, r)
		}
		if again := NormalizePath("/" + r); again != r {
			t.Fatalf("not idempotent: NormalizePath(%q) = %q, NormalizePath(%q) = %q", p, r, "/"+r, again)
		}
		if again := NormalizePath(r); again != r {
			t.Fatalf("not idempotent without slash: NormalizePath(%q) = %q, NormalizePath(%q) = %q", p, r, r, again)
		}
		// Nova's ec2 prefix rule: /X and /ec2/X are the same path unless X
		// is itself under ec2 or openstack.
		if rest, ok := strings.CutPrefix(r, "ec2/"); ok && len(segs) > 1 && segs[1] != "ec2" && segs[1] != "openstack" {
			if got := NormalizePath("/" + rest); got != r {
				t.Fatalf("prefix rule: NormalizePath(%q) = %q, want %q", "/"+rest, got, r)
			}
		}
	})
}

// FuzzCleanAbs checks that cleanAbs, path.Clean without its walk for the
// clean paths guests ask for, is path.Clean for every absolute path.
func FuzzCleanAbs(f *testing.F) {
	for _, s := range []string{"/", "//", "/.", "/..", "/a/", "/a//b", "/a/./b", "/a/../b", "/.a/b", "/a/.b/",
		"/a/b.", "/a./b/", "/openstack/latest/meta_data.json", "/2009-04-04/meta-data/", "/a/b/..", "/a/b/.", "/...", "///"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		p = "/" + p
		if got, want := cleanAbs(p), path.Clean(p); got != want {
			t.Fatalf("cleanAbs(%q) = %q, path.Clean: %q", p, got, want)
		}
	})
}
