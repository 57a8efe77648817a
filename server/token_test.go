package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/model"
)

const (
	otherUUID = "9a1c0d2e-4b5f-4c6d-8e7f-0a1b2c3d4e5f"
	otherAddr = "10.0.0.6:40000"
)

// otherInstance is a second, small instance in another project.
func otherInstance(t testing.TB) *model.Instance {
	t.Helper()
	in := &model.Instance{
		Name: "db-1", UUID: otherUUID, Hostname: "db-1", ProjectID: "other",
		Addresses: []string{"10.0.0.6", "fd00::6"},
		UserData:  "#cloud-config\n# " + secretTag + "-other\n",
	}
	in.Normalize()
	if err := in.Validate(); err != nil {
		t.Fatalf("otherInstance: %v", err)
	}
	return in
}

// req sends a request with headers (header values may repeat).
func req(h http.Handler, method, target, remote string, header http.Header, body string) response {
	var r *http.Request
	if body != "" {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	r.RemoteAddr = remote
	for k, v := range header {
		r.Header[http.CanonicalHeaderKey(k)] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	b := w.Body.String()
	return response{status: res.StatusCode, ctype: res.Header.Get("Content-Type"), header: res.Header, body: b}
}

// mintToken asks s for a token from remote; it fails the test unless it
// gets one.
func mintToken(t testing.TB, s http.Handler, remote, ttl string) string {
	t.Helper()
	r := req(s, http.MethodPut, "/latest/api/token", remote, http.Header{"X-aws-ec2-metadata-token-ttl-seconds": {ttl}}, "")
	if r.status != 200 {
		t.Fatalf("token PUT from %s: %d %q", remote, r.status, r.body)
	}
	rememberToken(r.body)
	return r.body
}

func tokenSetup(t *testing.T, policy TokenPolicy) (*Server, *fakeDocs, *clock) {
	t.Helper()
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.publish(t, otherInstance(t))
	clk := newClock("2026-01-01")
	o := testOptions(clk.Now)
	o.TokenPolicy = policy
	return New(docs, o), docs, clk
}

func TestTokenPUT(t *testing.T) {
	s, _, _ := tokenSetup(t, TokenOptional)
	const ttlHdr = "X-aws-ec2-metadata-token-ttl-seconds"
	for _, tc := range []struct {
		name   string
		method string
		target string
		remote string
		header http.Header
		status int
	}{
		{"ttl 0", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"0"}}, 400},
		{"ttl 1", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"1"}}, 200},
		{"ttl 21600", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"21600"}}, 200},
		{"ttl 21601", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"21601"}}, 400},
		{"ttl abc", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"abc"}}, 400},
		{"ttl -1", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"-1"}}, 400},
		{"ttl +5", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"+5"}}, 400},
		{"ttl 1.5", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"1.5"}}, 400},
		{"ttl huge", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"99999999999999999999"}}, 400},
		{"ttl twice", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"5", "6"}}, 400},
		{"ttl missing", "PUT", "/latest/api/token", richAddr, nil, 400},
		{"ttl empty", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {""}}, 400},
		{"forwarded", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"60"}, "X-Forwarded-For": {"10.0.0.5"}}, 403},
		{"forwarded empty", "PUT", "/latest/api/token", richAddr, http.Header{ttlHdr: {"60"}, "X-Forwarded-For": {""}}, 403},
		{"forwarded without ttl", "PUT", "/latest/api/token", richAddr, http.Header{"X-Forwarded-For": {"10.0.0.5"}}, 403},
		{"unknown caller", "PUT", "/latest/api/token", "192.0.2.99:1", http.Header{ttlHdr: {"60"}}, 404},
		{"GET token path", "GET", "/latest/api/token", richAddr, http.Header{ttlHdr: {"60"}}, 405},
		{"POST token path", "POST", "/latest/api/token", richAddr, http.Header{ttlHdr: {"60"}}, 405},
		{"ec2 prefix form", "PUT", "/ec2/latest/api/token/", richAddr, http.Header{ttlHdr: {"60"}}, 200},
		{"only latest", "PUT", "/2009-04-04/api/token", richAddr, http.Header{ttlHdr: {"60"}}, 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req(s, tc.method, tc.target, tc.remote, tc.header, "")
			if r.status != tc.status {
				t.Fatalf("%s %s: %d %q, want %d", tc.method, tc.target, r.status, r.body, tc.status)
			}
			if r.status != 200 {
				return
			}
			rememberToken(r.body)
			//lint:ignore SA1008 the table sends the header under AWS's own (non-canonical) spelling, as clients do
			if got, want := r.header.Get(ttlHdr), tc.header[ttlHdr][0]; got != want {
				t.Errorf("TTL header echoed as %q, want %q", got, want)
			}
			if mediaType(r.ctype) != textPlain {
				t.Errorf("Content-Type %q", r.ctype)
			}
			if len(r.body) != tokenLen || strings.ContainsAny(r.body, "+/=\n") {
				t.Errorf("token %q: want %d URL-safe characters", r.body, tokenLen)
			}
		})
	}
	// Tokens differ even when asked for at the same moment.
	if a, b := mintToken(t, s, richAddr, "60"), mintToken(t, s, richAddr, "60"); a == b {
		t.Errorf("two tokens are equal: %q", a)
	}
}

func TestTokenPolicies(t *testing.T) {
	const target = "/latest/meta-data/hostname"
	for _, policy := range []TokenPolicy{TokenOptional, TokenRequired} {
		t.Run(string(policy), func(t *testing.T) {
			s, _, clk := tokenSetup(t, policy)
			tokA := mintToken(t, s, richAddr, "60")
			tokA2 := mintToken(t, s, "127.0.0.1:5", "60") // A, from another of its addresses
			tokB := mintToken(t, s, otherAddr, "60")
			short := mintToken(t, s, richAddr, "1")
			none := 200
			if policy == TokenRequired {
				none = 401
			}
			for _, tc := range []struct {
				name   string
				remote string
				tokens []string // nil: no header
				status int
			}{
				{"no token", richAddr, nil, none},
				{"own token", richAddr, []string{tokA}, 200},
				{"short-lived token, still valid", richAddr, []string{short}, 200},
				{"other instance's token", richAddr, []string{tokB}, 401},
				{"own token used by B", otherAddr, []string{tokA}, 401},
				{"token of another address of the same instance", richAddr, []string{tokA2}, 401},
				{"garbage", richAddr, []string{"garbage"}, 401},
				{"empty", richAddr, []string{""}, 401},
				{"right length, wrong bytes", richAddr, []string{strings.Repeat("A", tokenLen)}, 401},
				{"truncated", richAddr, []string{tokA[:tokenLen-1]}, 401},
				{"flipped", richAddr, []string{flip(tokA)}, 401},
				{"two tokens", richAddr, []string{tokA, tokA}, 401},
			} {
				h := http.Header{}
				if tc.tokens != nil {
					h["X-aws-ec2-metadata-token"] = tc.tokens
				}
				if r := req(s, "GET", target, tc.remote, h, ""); r.status != tc.status {
					t.Errorf("%s: %d %q, want %d", tc.name, r.status, r.body, tc.status)
				}
			}
			// "/" needs nobody and no token.
			if r := req(s, "GET", "/", richAddr, nil, ""); r.status != 200 {
				t.Errorf("GET / under %s: %d", policy, r.status)
			}
			// Expiry (the clock is injected): the 1-second token dies.
			clk.Add(1500 * time.Millisecond)
			if r := req(s, "GET", target, richAddr, http.Header{"X-aws-ec2-metadata-token": {short}}, ""); r.status != 401 {
				t.Errorf("expired token: %d, want 401", r.status)
			}
			if r := req(s, "GET", target, richAddr, http.Header{"X-aws-ec2-metadata-token": {tokA}}, ""); r.status != 200 {
				t.Errorf("60 s token after 1.5 s: %d", r.status)
			}
			clk.Add(59 * time.Second)
			if r := req(s, "GET", target, richAddr, http.Header{"X-aws-ec2-metadata-token": {tokA}}, ""); r.status != 401 {
				t.Errorf("60 s token after 60.5 s: %d, want 401", r.status)
			}
		})
	}
}

func flip(tok string) string {
	b := []byte(tok)
	if b[10] == 'A' {
		b[10] = 'B'
	} else {
		b[10] = 'A'
	}
	return string(b)
}

// TestTokenKeyRotation: tokens signed with a prior key verify while it is
// still in the list, and no longer once it is dropped.
func TestTokenKeyRotation(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	keys := NewKeyRing([]byte(testTokenKey))
	o := testOptions(at("2026-01-01"))
	o.TokenKeys, o.TokenPolicy = keys, TokenRequired
	s := New(docs, o)
	old := mintToken(t, s, richAddr, "600")
	keys.Set([]byte(testTokenKey+"-new"), []byte(testTokenKey))
	fresh := mintToken(t, s, richAddr, "600")
	for name, tc := range map[string]struct {
		tok    string
		status int
	}{"old key": {old, 200}, "new key": {fresh, 200}} {
		if r := req(s, "GET", "/latest/meta-data/hostname", richAddr, http.Header{"X-aws-ec2-metadata-token": {tc.tok}}, ""); r.status != tc.status {
			t.Errorf("%s during overlap: %d", name, r.status)
		}
	}
	keys.Set([]byte(testTokenKey + "-new"))
	if r := req(s, "GET", "/latest/meta-data/hostname", richAddr, http.Header{"X-aws-ec2-metadata-token": {old}}, ""); r.status != 401 {
		t.Errorf("token of a retired key: %d, want 401", r.status)
	}
	if r := req(s, "GET", "/latest/meta-data/hostname", richAddr, http.Header{"X-aws-ec2-metadata-token": {fresh}}, ""); r.status != 200 {
		t.Errorf("token of the current key: %d", r.status)
	}
}

// TestInstanceTokenPolicy: a per-instance policy overrides the host's.
func TestInstanceTokenPolicy(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.publish(t, otherInstance(t))
	o := testOptions(at("2026-01-01"))
	o.TokenPolicy = TokenOptional
	o.InstanceTokenPolicy = TokenPolicyMap(map[string]TokenPolicy{otherUUID: TokenRequired})
	s := New(docs, o)
	if r := get(s, "/latest/meta-data/hostname"); r.status != 200 {
		t.Errorf("optional instance without token: %d", r.status)
	}
	if r := do(s, "GET", "/latest/meta-data/hostname", otherAddr); r.status != 401 {
		t.Errorf("required instance without token: %d, want 401", r.status)
	}
	tok := mintToken(t, s, otherAddr, "60")
	if r := req(s, "GET", "/latest/meta-data/hostname", otherAddr, http.Header{"X-aws-ec2-metadata-token": {tok}}, ""); r.status != 200 || r.body != "db-1.novalocal" {
		t.Errorf("required instance with token: %d %q", r.status, r.body)
	}
}

func TestParseTokenPolicy(t *testing.T) {
	for in, want := range map[string]TokenPolicy{"": TokenOptional, "optional": TokenOptional, "required": TokenRequired} {
		if got, err := ParseTokenPolicy(in); err != nil || got != want {
			t.Errorf("ParseTokenPolicy(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseTokenPolicy("Required"); err == nil {
		t.Error("ParseTokenPolicy accepts Required")
	}
}
