package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

const (
	proxyPeer     = "192.0.2.10:5000"
	proxyPeer6    = "[2001:db8:1::10]:5000"
	untrustedPeer = "198.51.100.7:1234"
)

func proxySetup(t testing.TB, tweak func(*Options)) *Server {
	t.Helper()
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.publish(t, otherInstance(t))
	o := testOptions(at("2026-01-01"))
	o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:1::/48")}
	if tweak != nil {
		tweak(&o)
	}
	return New(docs, o)
}

func sig(secret, id string) string { return Signature([]byte(secret), id) }

// proxyHeaders builds Nova proxy headers for an instance.
func proxyHdr(id, tenant, signature string) http.Header {
	h := http.Header{}
	h.Set("X-Instance-ID", id)
	h.Set("X-Tenant-ID", tenant)
	h.Set("X-Instance-ID-Signature", signature)
	return h
}

func TestProxyHeaders(t *testing.T) {
	s := proxySetup(t, nil)
	good := proxyHdr(richUUID, "demo", sig(testProxySecret, richUUID))
	with := func(h http.Header, k string, v ...string) http.Header {
		c := h.Clone()
		if v == nil {
			c.Del(k)
		} else {
			c[http.CanonicalHeaderKey(k)] = v
		}
		return c
	}
	const (
		web = "web-1.novalocal"
		db  = "db-1.novalocal"
	)
	for _, tc := range []struct {
		name   string
		remote string
		header http.Header
		status int
		body   string // for 200
	}{
		// Nova's proxy mode, from a trusted proxy.
		{"signed, current secret", proxyPeer, good, 200, web},
		{"signed, prior secret", proxyPeer, proxyHdr(richUUID, "demo", sig(testPriorSecret, richUUID)), 200, web},
		{"signed from an IPv6 proxy", proxyPeer6, good, 200, web},
		{"signed, other instance", proxyPeer, proxyHdr(otherUUID, "other", sig(testProxySecret, otherUUID)), 200, db},
		{"wrong secret", proxyPeer, proxyHdr(richUUID, "demo", sig("not-the-secret", richUUID)), 403, ""},
		{"signature of another id", proxyPeer, proxyHdr(richUUID, "demo", sig(testProxySecret, otherUUID)), 403, ""},
		{"upper-case hex signature", proxyPeer, proxyHdr(richUUID, "demo", strings.ToUpper(sig(testProxySecret, richUUID))), 403, ""},
		{"truncated signature", proxyPeer, proxyHdr(richUUID, "demo", sig(testProxySecret, richUUID)[:63]), 403, ""},
		{"empty signature", proxyPeer, with(good, "X-Instance-ID-Signature", ""), 403, ""},
		{"missing signature", proxyPeer, with(good, "X-Instance-ID-Signature"), 400, ""},
		{"missing tenant", proxyPeer, with(good, "X-Tenant-ID"), 400, ""},
		{"duplicated instance id", proxyPeer, with(good, "X-Instance-ID", richUUID, richUUID), 400, ""},
		{"duplicated tenant", proxyPeer, with(good, "X-Tenant-ID", "demo", "demo"), 400, ""},
		{"duplicated signature", proxyPeer, with(good, "X-Instance-ID-Signature", good.Get("X-Instance-ID-Signature"), good.Get("X-Instance-ID-Signature")), 400, ""},
		{"project mismatch", proxyPeer, with(good, "X-Tenant-ID", "other"), 404, ""},
		{"empty tenant", proxyPeer, with(good, "X-Tenant-ID", ""), 404, ""},
		{"unknown instance, signed", proxyPeer, proxyHdr("00000000-0000-0000-0000-000000000000", "demo", sig(testProxySecret, "00000000-0000-0000-0000-000000000000")), 404, ""},
		{"empty instance id, signed", proxyPeer, proxyHdr("", "demo", sig(testProxySecret, "")), 404, ""},
		{"signed headers win over X-Forwarded-For", proxyPeer, with(good, "X-Forwarded-For", "10.0.0.6"), 200, web},
		// Without X-Instance-ID a trusted proxy names the guest by
		// X-Forwarded-For (else its own address counts).
		{"missing instance id: by peer", proxyPeer, with(good, "X-Instance-ID"), 404, ""},
		{"forwarded", proxyPeer, http.Header{"X-Forwarded-For": {"10.0.0.6"}}, 200, db},
		{"forwarded list: first", proxyPeer, http.Header{"X-Forwarded-For": {"10.0.0.6, 192.0.2.10"}}, 200, db},
		{"forwarded twice: first header", proxyPeer, http.Header{"X-Forwarded-For": {"10.0.0.5", "10.0.0.6"}}, 200, web},
		{"forwarded IPv6", proxyPeer, http.Header{"X-Forwarded-For": {"fd00::6"}}, 200, db},
		{"forwarded IPv4-mapped", proxyPeer, http.Header{"X-Forwarded-For": {"::ffff:10.0.0.6"}}, 200, db},
		{"forwarded with port", proxyPeer, http.Header{"X-Forwarded-For": {"10.0.0.6:4711"}}, 200, db},
		{"forwarded IPv6 with port", proxyPeer, http.Header{"X-Forwarded-For": {"[fd00::6]:4711"}}, 200, db},
		{"forwarded garbage", proxyPeer, http.Header{"X-Forwarded-For": {"not-an-ip"}}, 400, ""},
		{"forwarded empty", proxyPeer, http.Header{"X-Forwarded-For": {""}}, 400, ""},
		{"forwarded unknown", proxyPeer, http.Header{"X-Forwarded-For": {"203.0.113.1"}}, 404, ""},
		{"trusted proxy itself", proxyPeer, nil, 404, ""},
		// From an untrusted peer every such header is ignored: the peer
		// address decides.
		{"untrusted: signed headers ignored", richAddr, proxyHdr(otherUUID, "other", sig(testProxySecret, otherUUID)), 200, web},
		{"untrusted: bad headers ignored", richAddr, with(good, "X-Instance-ID", "a", "b"), 200, web},
		{"untrusted: forwarded ignored", richAddr, http.Header{"X-Forwarded-For": {"10.0.0.6"}}, 200, web},
		{"untrusted: garbage forwarded ignored", richAddr, http.Header{"X-Forwarded-For": {"garbage"}}, 200, web},
		{"untrusted unknown peer with signed headers", untrustedPeer, good, 404, ""},
		{"untrusted unknown peer forwarding", untrustedPeer, http.Header{"X-Forwarded-For": {"10.0.0.5"}}, 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req(s, "GET", "/latest/meta-data/hostname", tc.remote, tc.header, "")
			if r.status != tc.status {
				t.Fatalf("%d %q, want %d", r.status, r.body, tc.status)
			}
			if tc.status == 200 && r.body != tc.body {
				t.Errorf("body %q, want %q", r.body, tc.body)
			}
			if strings.Contains(r.body, testProxySecret) || (tc.status != 200 && strings.Contains(r.body, sig(testProxySecret, richUUID))) {
				t.Errorf("body leaks a secret or the expected signature: %q", r.body)
			}
		})
	}
}

// TestProxyWithoutSecret: with no secret configured X-Instance-ID is never
// honoured, even from a trusted proxy (X-Forwarded-For still is); with no
// trusted network nothing is.
func TestProxyWithoutSecret(t *testing.T) {
	noSecret := proxySetup(t, func(o *Options) { o.ProxySecrets = nil })
	emptyRing := proxySetup(t, func(o *Options) { o.ProxySecrets = NewKeyRing() })
	noTrust := proxySetup(t, func(o *Options) { o.TrustedProxies = nil })
	signed := proxyHdr(richUUID, "demo", sig(testProxySecret, richUUID))
	for name, s := range map[string]*Server{"nil secrets": noSecret, "empty ring": emptyRing} {
		if r := req(s, "GET", "/latest/meta-data/hostname", proxyPeer, signed, ""); r.status != 404 {
			t.Errorf("%s: signed headers from a trusted proxy: %d, want 404 (not honoured)", name, r.status)
		}
		if r := req(s, "GET", "/latest/meta-data/hostname", proxyPeer, http.Header{"X-Forwarded-For": {"10.0.0.5"}}, ""); r.status != 200 {
			t.Errorf("%s: X-Forwarded-For from a trusted proxy: %d", name, r.status)
		}
	}
	if r := req(noTrust, "GET", "/latest/meta-data/hostname", proxyPeer, signed, ""); r.status != 404 {
		t.Errorf("no trusted networks: signed headers: %d, want 404", r.status)
	}
	if r := req(noTrust, "GET", "/latest/meta-data/hostname", proxyPeer, http.Header{"X-Forwarded-For": {"10.0.0.5"}}, ""); r.status != 404 {
		t.Errorf("no trusted networks: X-Forwarded-For: %d, want 404", r.status)
	}
}

// TestSecretRotation: swapping the ring's keys takes effect at once.
func TestSecretRotation(t *testing.T) {
	ring := NewKeyRing([]byte(testProxySecret))
	s := proxySetup(t, func(o *Options) { o.ProxySecrets = ring })
	next := "next-" + testProxySecret
	if r := req(s, "GET", "/latest/meta-data/hostname", proxyPeer, proxyHdr(richUUID, "demo", sig(next, richUUID)), ""); r.status != 403 {
		t.Errorf("next secret before rotation: %d", r.status)
	}
	ring.Set([]byte(next), []byte(testProxySecret))
	for _, secret := range []string{next, testProxySecret} {
		if r := req(s, "GET", "/latest/meta-data/hostname", proxyPeer, proxyHdr(richUUID, "demo", sig(secret, richUUID)), ""); r.status != 200 {
			t.Errorf("during overlap: %d", r.status)
		}
	}
	ring.Set([]byte(next))
	if r := req(s, "GET", "/latest/meta-data/hostname", proxyPeer, proxyHdr(richUUID, "demo", sig(testProxySecret, richUUID)), ""); r.status != 403 {
		t.Errorf("retired secret: %d, want 403", r.status)
	}
}

// TestSignatureIsNovas checks Signature against values computed with
// Nova's formula in Python:
// hmac.new(secret.encode(), instance_id.encode(), hashlib.sha256).hexdigest().
func TestSignatureIsNovas(t *testing.T) {
	for _, tc := range []struct{ secret, id, want string }{
		{"key", "The quick brown fox jumps over the lazy dog", "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"},
		{testProxySecret, richUUID, "79fb78d208216b7961d70e3d871253c0beba4c908207659769c61d4376cf309c"},
	} {
		if got := Signature([]byte(tc.secret), tc.id); got != tc.want {
			t.Errorf("Signature(%q) = %s, want %s", tc.id, got, tc.want)
		}
	}
}

// TestSignatureCompareIsConstantTime inspects validSignature: the
// signature is compared with hmac.Equal, never with ==, and every secret
// is tried (no return inside the loop).
func TestSignatureCompareIsConstantTime(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "identify.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "validSignature" {
			fn = fd
		}
	}
	if fn == nil {
		t.Fatal("no validSignature in identify.go")
	}
	var equal, eqOp, returnInLoop bool
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "hmac" && sel.Sel.Name == "Equal" {
					equal = true
				}
				if x, ok := sel.X.(*ast.Ident); ok && (x.Name == "bytes" || x.Name == "strings") && (sel.Sel.Name == "Equal" || sel.Sel.Name == "Compare") {
					eqOp = true
				}
			}
		case *ast.BinaryExpr:
			if n.Op == token.EQL || n.Op == token.NEQ {
				eqOp = true
			}
		case *ast.RangeStmt:
			ast.Inspect(n.Body, func(m ast.Node) bool {
				if _, ok := m.(*ast.ReturnStmt); ok {
					returnInLoop = true
				}
				return true
			})
		}
		return true
	})
	if !equal || eqOp || returnInLoop {
		t.Errorf("validSignature: hmac.Equal used %v, other comparison %v, early return %v", equal, eqOp, returnInLoop)
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes(" 10.0.0.0/8, 192.0.2.7 ,fd00::/8,::ffff:10.1.0.0/112,,10.9.8.7/16")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.7/32", "fd00::/8", "10.1.0.0/16", "10.9.0.0/16"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("prefix %d = %s, want %s", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "nope", "10.0.0.1/8/8"} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("ParsePrefixes(%q) accepted", bad)
		}
	}
}

// FuzzIdentify checks the invariants of caller identification over
// arbitrary peers and header values: it never panics; an untrusted peer is
// always identified by its own address; a proxy-mode caller always
// carries a valid signature for its instance id; an address other than
// the peer's comes only from a trusted peer's X-Forwarded-For; addresses
// are never IPv4-mapped or zoned.
func FuzzIdentify(f *testing.F) {
	s := proxySetup(f, nil)
	f.Add(proxyPeer, "10.0.0.6", richUUID, "demo", sig(testProxySecret, richUUID), uint8(0))
	f.Add(untrustedPeer, "10.0.0.5, 1.2.3.4", otherUUID, "other", sig(testProxySecret, otherUUID), uint8(7))
	f.Add("[2001:db8:1::10%eth0]:1", "[::ffff:1.2.3.4]:80", "", "", "", uint8(2))
	f.Add("garbage", ",,,", "x", "y", "z", uint8(255))
	f.Add("192.0.2.1", " fe80::1%lo ", richUUID, "demo", "00", uint8(16))
	f.Fuzz(func(t *testing.T, remote, xff, id, tenant, signature string, present uint8) {
		h := http.Header{}
		if present&1 != 0 {
			h[hdrForwardedFor] = []string{xff}
		}
		if present&2 != 0 {
			h[hdrInstanceID] = []string{id}
		}
		if present&4 != 0 {
			h[hdrTenantID] = []string{tenant}
		}
		if present&8 != 0 {
			h[hdrSignature] = []string{signature}
		}
		if present&16 != 0 {
			h[hdrInstanceID] = append(h[hdrInstanceID], id)
		}
		c, err := s.identify(h, remote)
		peer := peerAddr(remote)
		if c.peer != peer {
			t.Fatalf("peer %v, want %v", c.peer, peer)
		}
		for _, a := range []netip.Addr{c.peer, c.addr} {
			if a.Is4In6() || a.Zone() != "" {
				t.Fatalf("address %v is mapped or zoned", a)
			}
		}
		trusted := peer.IsValid() && s.trusted(peer)
		if !trusted {
			if err != nil || c.instanceID != "" || c.addr != peer {
				t.Fatalf("untrusted peer %q: caller %+v, err %v", remote, c, err)
			}
			return
		}
		if err != nil {
			if err.status != 400 && err.status != 403 {
				t.Fatalf("status %d", err.status)
			}
			return
		}
		if c.instanceID != "" || (len(h[hdrInstanceID]) > 0 && c.tenantID != "") {
			if !validSignature(c.instanceID, h.Get(hdrSignature), s.proxySecrets) {
				t.Fatalf("proxy caller %q without a valid signature", c.instanceID)
			}
			if c.addr.IsValid() {
				t.Fatalf("proxy caller with an address %v", c.addr)
			}
			return
		}
		if c.addr != peer {
			a, ok := firstForwarded(h[hdrForwardedFor])
			if !ok || a != c.addr {
				t.Fatalf("address %v is neither the peer nor X-Forwarded-For %q", c.addr, xff)
			}
		}
	})
}
