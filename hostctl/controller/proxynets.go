package controller

import (
	"fmt"
	"net/netip"

	"github.com/vmeta/vmeta/internal/model"
)

// checkProxyAddresses refuses an instance address inside one of the
// metadata service's trusted proxy networks (Options.ProxyNetworks).
// Requests from such an address are believed when they name a guest (in
// X-Forwarded-For, or signed headers when the secret is known there), so a
// guest there could read any instance's metadata; and the metadata service
// never identifies a guest by a proxy's address, so the instance would get
// nothing from it anyway. The server enforces the second part itself (a
// replica may trust networks this host does not know); this is the
// operator's early, clear error.
func (c *Controller) checkProxyAddresses(in *model.Instance) error {
	var errs []model.FieldError
	for i, s := range in.Addresses {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue // Validate reports it
		}
		a = a.Unmap().WithZone("")
		for _, p := range c.proxyNets {
			if p.Contains(a) {
				errs = append(errs, model.FieldError{
					Field: fmt.Sprintf("addresses[%d]", i), Value: s,
					Rule: fmt.Sprintf("must not be in the metadata service's trusted proxy network %s (--metadata-trusted-proxies): a guest at a proxy's address could name other instances", p),
				})
				break
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("apply %s: %w", in.Name, &model.SpecError{Errors: errs})
	}
	return nil
}
