package auth_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/api/types"
)

func TestTokenEntriesValidated(t *testing.T) {
	good := strings.Repeat("ab", 32)
	for name, e := range map[string]auth.TokenEntry{
		"no name":              {Role: types.RoleAdmin, SHA256: good},
		"bad role":             {Name: "x", Role: "root", SHA256: good},
		"member w/o project":   {Name: "x", Role: types.RoleMember, SHA256: good},
		"admin with project":   {Name: "x", Role: types.RoleAdmin, Project: "p", SHA256: good},
		"plaintext not a hash": {Name: "x", Role: types.RoleAdmin, SHA256: "vmeta_secret"},
	} {
		if _, err := auth.NewTokenAuth([]auth.TokenEntry{e}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestMalformedAuthorization(t *testing.T) {
	_, e, err := auth.NewToken("x", types.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	auth, _ := auth.NewTokenAuth([]auth.TokenEntry{e})
	for _, h := range [][]string{nil, {"Basic Zm9vOmJhcg=="}, {"Bearer "}, {"Bearer a", "Bearer b"}} {
		r := httptest.NewRequest(http.MethodGet, "/v1/instances", nil)
		for _, v := range h {
			r.Header.Add("Authorization", v)
		}
		if _, err := auth.Authenticate(r); err == nil {
			t.Errorf("Authorization %q accepted", h)
		}
	}
}
