package nics

import (
	"fmt"
	"net/netip"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
)

// TrustProxies gives the part the metadata service's trusted proxy
// networks (--metadata-trusted-proxies): an apply is refused an instance
// address inside one (checkProxyAddresses). Call it before the core
// serves.
func (p *Part) TrustProxies(nets []netip.Prefix) { p.proxies = nets }

// publishes reports whether op stores and publishes the instance's spec
// (its addresses with it): the operations whose check refuses an address
// inside a trusted proxy network.
func publishes(op part.Op) bool {
	return op == part.Apply || op == part.Resize || op == part.Rebuild || op == part.Evacuate
}

// checkProxyAddresses refuses an instance address inside one of the
// metadata service's trusted proxy networks (TrustProxies). Requests
// from such an address are believed when they name a guest (in
// X-Forwarded-For, or signed headers when the secret is known there), so
// a guest there could read any instance's metadata; and the metadata
// service never identifies a guest by a proxy's address, so the instance
// would get nothing from it anyway. The server enforces the second part
// itself (a replica may trust networks this host does not know); this is
// the operator's early, clear error (a *model.SpecError: the core names
// the operation and the instance).
func (p *Part) checkProxyAddresses(in *model.Instance) error {
	var errs []model.FieldError
	for i, s := range in.Addresses {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue // Validate reports it
		}
		a = a.Unmap().WithZone("")
		for _, n := range p.proxies {
			if n.Contains(a) {
				errs = append(errs, model.FieldError{
					Field: fmt.Sprintf("addresses[%d]", i), Value: s,
					Rule: fmt.Sprintf("must not be in the metadata service's trusted proxy network %s (--metadata-trusted-proxies): a guest at a proxy's address could name other instances", n),
				})
				break
			}
		}
	}
	if len(errs) > 0 {
		return &model.SpecError{Errors: errs}
	}
	return nil
}
