package server

import (
	"bytes"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

// putInstance renders and publishes an instance in a real store.
func putInstance(t *testing.T, st store.Store, in *model.Instance) store.Document {
	t.Helper()
	return putInstanceTB(t, st, in)
}

// putInstanceTB is putInstance for tests and benchmarks.
func putInstanceTB(t testing.TB, st store.Store, in *model.Instance) store.Document {
	t.Helper()
	tr, err := metadata.Render(in, metadata.Options{Rand: bytes.NewReader(make([]byte, 512))})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := tr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	_, doc, err := st.Put(t.Context(),
		store.Instance{Name: in.Name, UUID: in.UUID, ProjectID: in.ProjectID, Addresses: in.Addresses, Spec: []byte(`{}`)},
		store.Document{InstanceUUID: in.UUID, ProjectID: in.ProjectID, Addresses: in.Addresses, Tree: enc}, -1)
	if err != nil {
		t.Fatalf("Put %s: %v", in.Name, err)
	}
	return doc
}

// TestWithBolt runs the server over the real embedded store: address
// lookup, the change feed (a publish through the store reaches the cache
// without Invalidate), the password endpoint, deletion.
func TestWithBolt(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	putInstance(t, st, richInstance(t))
	putInstance(t, st, otherInstance(t))

	o := testOptions(at("2026-01-01"))
	o.SweepInterval = -1 // the feed alone
	s := New(st, o)
	runServer(t, s)

	if h := hostname(s, richAddr); h != "web-1.novalocal" {
		t.Fatalf("first read: %q", h)
	}
	if h := hostname(s, "[::1]:1"); h != "web-1.novalocal" {
		t.Fatalf("IPv6 address: %q", h)
	}
	// A publish of db-1 must come through (if Run had not subscribed
	// yet, the sweep after subscribing finds it).
	hostname(s, otherAddr)
	in := otherInstance(t)
	in.Hostname = "db-2"
	putInstance(t, st, in)
	eventually(t, "the store's change feed", func() bool { return hostname(s, otherAddr) == "db-2.novalocal" })

	in2 := richInstance(t)
	in2.Hostname = "web-2"
	putInstance(t, st, in2)
	eventually(t, "a second change", func() bool { return hostname(s, richAddr) == "web-2.novalocal" })

	// Password: once, then 409, stored in the real store.
	if r := req(s, "POST", "/openstack/latest/password", richAddr, nil, testPassword); r.status != 200 {
		t.Fatalf("POST password: %d %q", r.status, r.body)
	}
	if r := req(s, "POST", "/openstack/latest/password", richAddr, nil, "again"); r.status != 409 {
		t.Errorf("second POST: %d", r.status)
	}
	if r := get(s, "/openstack/latest/password"); r.body != testPassword {
		t.Errorf("GET password: %d", r.status)
	}
	// Project check against the stored document (proxy mode).
	ps := New(st, func() Options {
		o := testOptions(at("2026-01-01"))
		o.TrustedProxies = proxySetup(t, nil).trustedProxies
		return o
	}())
	if r := req(ps, "GET", "/latest/meta-data/hostname", proxyPeer, proxyHdr(richUUID, "demo", sig(testProxySecret, richUUID)), ""); r.status != 200 {
		t.Errorf("proxied: %d", r.status)
	}
	if r := req(ps, "GET", "/latest/meta-data/hostname", proxyPeer, proxyHdr(richUUID, "other", sig(testProxySecret, richUUID)), ""); r.status != 404 {
		t.Errorf("proxied, wrong project: %d", r.status)
	}

	// Deletion reaches the cache through the feed.
	if err := st.Delete(t.Context(), "db-1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deletion", func() bool { return do(s, http.MethodGet, "/latest/meta-data/hostname", otherAddr).status == 404 })
	if r := do(s.MetricsHandler(), "GET", "/healthz", "192.0.2.1:1"); r.status != 200 {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
}
