package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
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
		// With a proxy secret nothing but the signed headers names the
		// guest: X-Forwarded-For is not signed, and the proxy's own
		// address is no guest's.
		{"missing instance id: refused", proxyPeer, with(good, "X-Instance-ID"), 400, ""},
		{"forwarded, unsigned: refused", proxyPeer, http.Header{"X-Forwarded-For": {"10.0.0.6"}}, 400, ""},
		{"issue 21: spoofed first entry, unsigned: refused", proxyPeer, http.Header{"X-Forwarded-For": {"10.0.0.6, 10.0.0.5"}}, 400, ""},
		{"trusted proxy itself", proxyPeer, nil, 400, ""},
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

// proxiedInstance is an instance that claims trusted proxy addresses
// (192.0.2.10 is proxyPeer) besides one of its own.
func proxiedInstance(t testing.TB) *model.Instance {
	t.Helper()
	in := &model.Instance{
		Name: "px-1", UUID: proxiedUUID, Hostname: "px-1", ProjectID: "other",
		Addresses: []string{"192.0.2.10", "2001:db8:1::10", "10.0.0.7"},
	}
	in.Normalize()
	if err := in.Validate(); err != nil {
		t.Fatalf("proxiedInstance: %v", err)
	}
	return in
}

const proxiedUUID = "5d1e0f2a-3b4c-4d5e-8f60-718293a4b5c6"

// TestForwardedFor: from a trusted proxy without a proxy secret,
// X-Forwarded-For names the guest by the entry the trusted proxies added
// (the right-most one outside the trusted networks), never by what the
// client put in front of it; a trusted proxy's address never names a
// guest, even one that claims it.
func TestForwardedFor(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.publish(t, otherInstance(t))
	docs.publish(t, proxiedInstance(t))
	o := testOptions(at("2026-01-01"))
	o.ProxySecrets = nil
	o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:1::/48")}
	var logs testenv.SyncBuffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	o.AccessLog = false
	s := New(docs, o)
	xff := func(v ...string) http.Header { return http.Header{"X-Forwarded-For": v} }
	const (
		web = "web-1.novalocal"
		db  = "db-1.novalocal"
		px  = "px-1.novalocal"
	)
	for _, tc := range []struct {
		name   string
		remote string
		header http.Header
		status int
		body   string // for 200
	}{
		{"forwarded", proxyPeer, xff("10.0.0.6"), 200, db},
		// The case: a client (10.0.0.5) sends X-Forwarded-For
		// naming its neighbour, the proxy appends the client's address.
		{"issue 21: client's spoofed entry first", proxyPeer, xff("10.0.0.6, 10.0.0.5"), 200, web},
		{"spoofed entries, several", proxyPeer, xff("10.0.0.6, fd00::6, 10.0.0.6,10.0.0.5"), 200, web},
		{"garbage left of the proxy's entry ignored", proxyPeer, xff("not-an-ip, ,;, 10.0.0.5"), 200, web},
		{"chain of trusted proxies skipped", proxyPeer, xff("10.0.0.6, 10.0.0.5, 192.0.2.11, 2001:db8:1::7"), 200, web},
		{"client spoofing a trusted hop", proxyPeer, xff("10.0.0.6, 192.0.2.11, 10.0.0.5"), 200, web},
		{"forwarded IPv6", proxyPeer, xff("fd00::6"), 200, db},
		{"forwarded IPv4-mapped", proxyPeer, xff("::ffff:10.0.0.6"), 200, db},
		{"forwarded with port", proxyPeer, xff("10.0.0.6:4711"), 200, db},
		{"forwarded IPv6 with port", proxyPeer, xff("[fd00::6]:4711"), 200, db},
		{"forwarded from an IPv6 proxy", proxyPeer6, xff("10.0.0.5"), 200, web},
		{"instance's own untrusted address", proxyPeer, xff("10.0.0.7"), 200, px},
		{"forwarded twice: refused", proxyPeer, xff("10.0.0.5", "10.0.0.6"), 400, ""},
		{"forwarded twice, same value: refused", proxyPeer, xff("10.0.0.5", "10.0.0.5"), 400, ""},
		{"forwarded garbage", proxyPeer, xff("not-an-ip"), 400, ""},
		{"garbage right of the client", proxyPeer, xff("10.0.0.5, junk"), 400, ""},
		{"empty entry right of the client", proxyPeer, xff("10.0.0.5,"), 400, ""},
		{"forwarded empty", proxyPeer, xff(""), 400, ""},
		{"forwarded blank", proxyPeer, xff("  "), 400, ""},
		{"forwarded unknown", proxyPeer, xff("203.0.113.1"), 404, ""},
		// A trusted address names no guest, even one that claims it.
		{"trusted proxy itself (claimed by px-1)", proxyPeer, nil, 400, ""},
		{"IPv6 trusted proxy itself (claimed by px-1)", proxyPeer6, nil, 400, ""},
		{"forwarded names only a trusted address", proxyPeer, xff("192.0.2.10"), 400, ""},
		{"forwarded names only trusted addresses", proxyPeer, xff("2001:db8:1::10, 192.0.2.10"), 400, ""},
		{"X-Instance-ID ignored without a secret", proxyPeer, proxyHdr(otherUUID, "other", sig(testProxySecret, otherUUID)), 400, ""},
		// Untrusted peers: their own address, whatever they send.
		{"untrusted: forwarded ignored", richAddr, xff("10.0.0.6"), 200, web},
		{"untrusted: forwarded twice ignored", richAddr, xff("10.0.0.6", "10.0.0.6"), 200, web},
		{"untrusted: garbage ignored", richAddr, xff("garbage"), 200, web},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req(s, "GET", "/latest/meta-data/hostname", tc.remote, tc.header, "")
			if r.status != tc.status {
				t.Fatalf("%d %q, want %d", r.status, r.body, tc.status)
			}
			if tc.status == 200 && r.body != tc.body {
				t.Errorf("body %q, want %q", r.body, tc.body)
			}
			if tc.status != 200 && strings.Contains(r.body, ".novalocal") {
				t.Errorf("refusal carries a document: %q", r.body)
			}
		})
	}
	// px-1 was read (by its own address): the operator is told that its
	// trusted addresses never identify it.
	for _, a := range []string{"192.0.2.10", "2001:db8:1::10"} {
		if !strings.Contains(logs.String(), "address in a trusted proxy network") || !strings.Contains(logs.String(), "address="+a) || !strings.Contains(logs.String(), proxiedUUID) {
			t.Errorf("no warning about px-1's trusted address %s in the log:\n%s", a, logs.String())
		}
	}
	if strings.Contains(logs.String(), "address=10.0.0.7") {
		t.Errorf("warning about an untrusted address:\n%s", logs.String())
	}
}

// TestProxyWithoutSecret: with no secret configured X-Instance-ID is never
// honoured, even from a trusted proxy (X-Forwarded-For is); a configured
// secret file that holds no key yet honours neither (no signature
// verifies, and unsigned X-Forwarded-For is refused); with no trusted
// network nothing is.
func TestProxyWithoutSecret(t *testing.T) {
	noSecret := proxySetup(t, func(o *Options) { o.ProxySecrets = nil })
	emptyRing := proxySetup(t, func(o *Options) { o.ProxySecrets = NewKeyRing() })
	noTrust := proxySetup(t, func(o *Options) { o.TrustedProxies = nil })
	signed := proxyHdr(richUUID, "demo", sig(testProxySecret, richUUID))
	forwarded := http.Header{"X-Forwarded-For": {"10.0.0.5"}}
	for _, tc := range []struct {
		name              string
		s                 *Server
		signed, forwarded int
	}{
		{"nil secrets", noSecret, 400, 200},
		{"empty ring", emptyRing, 403, 400},
		{"no trusted networks", noTrust, 404, 404},
	} {
		if r := req(tc.s, "GET", "/latest/meta-data/hostname", proxyPeer, signed, ""); r.status != tc.signed {
			t.Errorf("%s: signed headers from %s: %d, want %d", tc.name, proxyPeer, r.status, tc.signed)
		}
		if r := req(tc.s, "GET", "/latest/meta-data/hostname", proxyPeer, forwarded, ""); r.status != tc.forwarded {
			t.Errorf("%s: X-Forwarded-For from %s: %d, want %d", tc.name, proxyPeer, r.status, tc.forwarded)
		}
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
// arbitrary peers and header values, with and without a proxy secret: it
// never panics; an untrusted peer is always identified by its own
// address; an address never lies in a trusted network; with a secret a
// trusted peer's caller always carries a valid signature for its instance
// id and no address; without one its address is the right-most entry
// outside the trusted networks of its only X-Forwarded-For header (an
// oracle written differently); addresses are never IPv4-mapped or zoned.
func FuzzIdentify(f *testing.F) {
	signed := proxySetup(f, nil)
	unsigned := proxySetup(f, func(o *Options) { o.ProxySecrets = nil })
	f.Add(proxyPeer, "10.0.0.6", richUUID, "demo", sig(testProxySecret, richUUID), uint8(0))
	f.Add(untrustedPeer, "10.0.0.5, 1.2.3.4", otherUUID, "other", sig(testProxySecret, otherUUID), uint8(7))
	f.Add("[2001:db8:1::10%eth0]:1", "[::ffff:1.2.3.4]:80", "", "", "", uint8(2))
	f.Add("garbage", ",,,", "x", "y", "z", uint8(255))
	f.Add("192.0.2.1", " fe80::1%lo ", richUUID, "demo", "00", uint8(16))
	f.Add(proxyPeer, "10.0.0.6, 10.0.0.5", "", "", "", uint8(1))
	f.Add(proxyPeer, "10.0.0.6, 10.0.0.5, 192.0.2.7", "", "", "", uint8(33))
	f.Add(proxyPeer, "junk, 10.0.0.5, 2001:db8:1::1", "", "", "", uint8(1))
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
		if present&32 != 0 {
			h[hdrForwardedFor] = append(h[hdrForwardedFor], "10.0.0.5")
		}
		peer := peerAddr(remote)
		for _, s := range []*Server{signed, unsigned} {
			c, err := s.identify(h, remote)
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
				continue
			}
			if c.addr.IsValid() && s.trusted(c.addr) {
				t.Fatalf("trusted peer %q: identified by the trusted address %v", remote, c.addr)
			}
			if err != nil {
				if err.status != 400 && err.status != 403 {
					t.Fatalf("status %d", err.status)
				}
				if c.addr.IsValid() || c.instanceID != "" {
					t.Fatalf("refused caller %+v carries an identity", c)
				}
				continue
			}
			if s.proxySecrets != nil {
				if !validSignature(c.instanceID, h.Get(hdrSignature), s.proxySecrets) || len(h[hdrSignature]) != 1 {
					t.Fatalf("proxy caller %q without a valid signature", c.instanceID)
				}
				if c.addr.IsValid() {
					t.Fatalf("proxy caller with an address %v", c.addr)
				}
				continue
			}
			if c.instanceID != "" || !c.addr.IsValid() {
				t.Fatalf("caller %+v from a trusted proxy without a secret", c)
			}
			if len(h[hdrForwardedFor]) != 1 {
				t.Fatalf("identified %v with %d X-Forwarded-For headers", c.addr, len(h[hdrForwardedFor]))
			}
			entries := strings.Split(h[hdrForwardedFor][0], ",")
			var want netip.Addr
			for i := len(entries) - 1; i >= 0; i-- {
				e := strings.TrimSpace(entries[i])
				a, perr := netip.ParseAddr(e)
				if perr != nil {
					ap, perr := netip.ParseAddrPort(e)
					if perr != nil {
						t.Fatalf("identified %v past the unparsable entry %q of %q", c.addr, e, xff)
					}
					a = ap.Addr()
				}
				a = a.Unmap().WithZone("")
				if !s.trusted(a) {
					want = a
					break
				}
			}
			if c.addr != want {
				t.Fatalf("X-Forwarded-For %q: identified %v, want %v", xff, c.addr, want)
			}
		}
	})
}
