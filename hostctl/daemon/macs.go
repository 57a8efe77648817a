package daemon

import (
	"log/slog"
	"net/netip"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/nics"
)

// useMACStore gives the nics part among parts the store its MAC address
// claims are kept in (shared by every host of the store) and whose
// address index it checks.
func useMACStore(parts []part.Part, st nics.Store, log *slog.Logger) {
	for _, p := range parts {
		if n, ok := p.(*nics.Part); ok {
			n.UseStore(st, log)
		}
	}
}

// trustProxies gives the nics part among parts the metadata service's
// trusted proxy networks: an apply is refused an instance address inside
// one.
func trustProxies(parts []part.Part, nets []netip.Prefix) {
	for _, p := range parts {
		if n, ok := p.(*nics.Part); ok {
			n.TrustProxies(nets)
		}
	}
}

// useLeaseEvents gives the nics part among parts the audit log it reports
// a fixed address leased to another MAC on (the instances stream).
func useLeaseEvents(parts []part.Part, audit nics.Emitter) {
	for _, p := range parts {
		if n, ok := p.(*nics.Part); ok {
			n.UseEvents(audit)
		}
	}
}
