package nics

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
)

// TestCheckProxyAddresses: an apply, resize or rebuild is refused an
// instance address inside one of the trusted proxy networks, a field
// error naming the address and the network; addresses outside them, and
// the operations that publish no spec, pass. Without a store too.
func TestCheckProxyAddresses(t *testing.T) {
	p := New(nil, "")
	p.TrustProxies([]netip.Prefix{netip.MustParsePrefix("10.9.0.0/24"), netip.MustParsePrefix("fd00:9::/64"), netip.MustParsePrefix("10.8.0.1/32")})
	for _, tc := range []struct {
		name         string
		addresses    []string
		field, value string // "" for accepted
	}{
		{"inside an IPv4 network", []string{"10.1.0.7", "10.9.0.20"}, "addresses[1]", "10.9.0.20"},
		{"a single trusted address", []string{"10.8.0.1"}, "addresses[0]", "10.8.0.1"},
		{"inside an IPv6 network", []string{"fd00:9::5"}, "addresses[0]", "fd00:9::5"},
		{"IPv4-mapped", []string{"::ffff:10.9.0.3"}, "addresses[0]", "::ffff:10.9.0.3"},
		{"next to a trusted address", []string{"10.8.0.2", "10.9.1.1"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &part.Instance{Spec: &model.Instance{Name: "px", Addresses: tc.addresses}}
			for _, op := range part.Ops() {
				err := p.Check(t.Context(), op, in)
				if tc.field == "" || !publishes(op) {
					if err != nil {
						t.Errorf("%s: %v, want accepted", op, err)
					}
					continue
				}
				var se *model.SpecError
				if !errors.As(err, &se) || len(se.Errors) != 1 || se.Errors[0].Field != tc.field || se.Errors[0].Value != tc.value ||
					!strings.Contains(se.Errors[0].Rule, "trusted proxy network") {
					t.Errorf("%s: %v, want a field error on %s (%s) naming the trusted proxy network", op, err, tc.field, tc.value)
				}
			}
		})
	}
	if !publishes(part.Apply) || !publishes(part.Resize) || !publishes(part.Rebuild) || !publishes(part.Evacuate) {
		t.Error("apply, resize, rebuild and evacuate (the new host's trusted proxy networks) must check the addresses")
	}
}
