package controller_test

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/nics"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

// TestApplyRefusesProxyAddresses: an instance address inside the metadata
// service's trusted proxy networks is refused at apply with a field error
// naming the address and the network, and nothing is stored; addresses
// outside them are accepted. The NICs part refuses them
// (hostctl/parts/nics, proxies.go), as the daemon registers it.
func TestApplyRefusesProxyAddresses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	nicsPart := nics.New(nil, "") // the part that refuses them, configured as the daemon does
	nicsPart.TrustProxies([]netip.Prefix{netip.MustParsePrefix("10.9.0.0/24"), netip.MustParsePrefix("fd00:9::/64"), netip.MustParsePrefix("10.8.0.1/32")})
	c := controller.New(st, controller.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler), Parts: []part.Part{nicsPart}})
	for _, tc := range []struct {
		name, addresses string
		field, value    string // "" for accepted
	}{
		{"inside an IPv4 network", "[10.1.0.7, 10.9.0.20]", "addresses[1]", "10.9.0.20"},
		{"a single trusted address", "[10.8.0.1]", "addresses[0]", "10.8.0.1"},
		{"inside an IPv6 network", "[fd00:9::5]", "addresses[0]", "fd00:9::5"},
		{"IPv4-mapped", "['::ffff:10.9.0.3']", "addresses[0]", "10.9.0.3"},
		{"next to a trusted address", "[10.8.0.2, 10.9.1.1]", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "px-" + strings.NewReplacer(" ", "-", "4", "", "6", "").Replace(tc.name)
			_, err := c.Apply(ctx, []byte("name: "+name+"\naddresses: "+tc.addresses+"\n"))
			_, getErr := st.Instance(ctx, name)
			if tc.field == "" {
				if err != nil || getErr != nil {
					t.Fatalf("apply: %v; stored: %v", err, getErr)
				}
				return
			}
			var se *model.SpecError
			if !errors.As(err, &se) || len(se.Errors) != 1 || se.Errors[0].Field != tc.field || se.Errors[0].Value != tc.value ||
				!strings.Contains(se.Errors[0].Rule, "trusted proxy network") {
				t.Fatalf("apply: %v, want a field error on %s (%s) naming the trusted proxy network", err, tc.field, tc.value)
			}
			if !errors.Is(getErr, store.ErrNotFound) {
				t.Errorf("refused instance stored: %v", getErr)
			}
		})
	}
}
