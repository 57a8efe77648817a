package server

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestPassword(t *testing.T) {
	s, docs, _ := setup(t, "2026-01-01")
	docs.publish(t, otherInstance(t))
	const latest = "/openstack/latest/password"

	type step struct {
		name   string
		method string
		target string
		remote string
		body   string
		status int
		want   *string // body of a 200
	}
	empty := ""
	pw := testPassword
	steps := []step{
		{"GET before any POST: empty", "GET", latest, richAddr, "", 200, &empty},
		{"GET 2013-04-04", "GET", "/openstack/2013-04-04/password", richAddr, "", 200, &empty},
		{"GET trailing slash", "GET", "/openstack/latest/password/", richAddr, "", 200, &empty},
		{"GET 2012-08-10: no password file", "GET", "/openstack/2012-08-10/password", richAddr, "", 404, nil},
		{"POST 2012-08-10: no password file", "POST", "/openstack/2012-08-10/password", richAddr, pw, 404, nil},
		{"POST to a non-password file", "POST", "/openstack/latest/meta_data.json", richAddr, pw, 405, nil},
		{"POST unknown file ending in password", "POST", "/openstack/latest/x/password", richAddr, pw, 404, nil},
		{"POST EC2 password path", "POST", "/latest/password", richAddr, pw, 405, nil},
		{"PUT", "PUT", latest, richAddr, pw, 400, nil},
		{"DELETE", "DELETE", latest, richAddr, "", 400, nil},
		{"HEAD (Nova: any method but GET and POST)", "HEAD", latest, richAddr, "", 400, nil},
		{"PATCH", "PATCH", latest, richAddr, pw, 400, nil},
		{"POST 1021 bytes", "POST", latest, richAddr, strings.Repeat("x", 1021), 400, nil},
		{"POST 5000 bytes", "POST", latest, richAddr, strings.Repeat("x", 5000), 400, nil},
		{"POST empty stores nothing", "POST", latest, richAddr, "", 200, &empty},
		{"GET after an empty POST", "GET", latest, richAddr, "", 200, &empty},
		{"POST", "POST", latest, richAddr, pw, 200, &empty},
		{"GET returns it", "GET", latest, richAddr, "", 200, &pw},
		{"GET from another version", "GET", "/openstack/2013-04-04/password", "[::1]:1", "", 200, &pw},
		{"second POST: conflict", "POST", latest, richAddr, "another", 409, nil},
		{"second POST, too large: conflict first (as Nova)", "POST", latest, richAddr, strings.Repeat("x", 2000), 409, nil},
		{"other instance: still empty", "GET", latest, otherAddr, "", 200, &empty},
		{"other instance: exactly 1020 bytes", "POST", latest, otherAddr, strings.Repeat("y", 1020), 200, nil},
		{"unknown caller", "POST", latest, "192.0.2.1:1", pw, 404, nil},
	}
	for _, st := range steps {
		r := req(s, st.method, st.target, st.remote, nil, st.body)
		if r.status != st.status {
			t.Errorf("%s: %s %s: %d %q, want %d", st.name, st.method, st.target, r.status, r.body, st.status)
			continue
		}
		if st.want != nil && r.body != *st.want {
			t.Errorf("%s: body %q, want %q", st.name, r.body, *st.want)
		}
		if r.status == 200 && st.method == "GET" && mediaType(r.ctype) != textPlain {
			t.Errorf("%s: Content-Type %q", st.name, r.ctype)
		}
	}
	if got, _ := docs.Password(t.Context(), otherUUID); len(got) != 1020 {
		t.Errorf("stored password of other: %d bytes", len(got))
	}

	// The password is read from the store, not cached: with the store
	// away, a GET is 503 while cached files are still served.
	docs.setDown(errors.New("connection refused"))
	if r := get(s, latest); r.status != 503 {
		t.Errorf("password GET with the store down: %d", r.status)
	}
	if r := req(s, "POST", latest, otherAddr, nil, "z"); r.status != 503 {
		t.Errorf("password POST with the store down: %d", r.status)
	}
	if r := get(s, "/openstack/latest/meta_data.json"); r.status != 200 {
		t.Errorf("cached file with the store down: %d", r.status)
	}
}

// TestPasswordNeedsToken: under the required policy the password endpoint
// is protected like every other file.
func TestPasswordNeedsToken(t *testing.T) {
	s, _, _ := tokenSetup(t, TokenRequired)
	if r := req(s, "POST", "/openstack/latest/password", richAddr, nil, testPassword); r.status != 401 {
		t.Errorf("POST without token: %d", r.status)
	}
	tok := mintToken(t, s, richAddr, "60")
	h := http.Header{"X-aws-ec2-metadata-token": {tok}}
	if r := req(s, "POST", "/openstack/latest/password", richAddr, h, testPassword); r.status != 200 {
		t.Errorf("POST with token: %d", r.status)
	}
	if r := req(s, "GET", "/openstack/latest/password", richAddr, h, ""); r.status != 200 || r.body != testPassword {
		t.Errorf("GET with token: %d", r.status)
	}
}
