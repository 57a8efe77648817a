package controller

import (
	"log/slog"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/nics"
	"github.com/vmeta/vmeta/hostctl/parts/passthrough"
)

// The parts the daemon registers that the harness's tests count on
// (hostctl/parts/passthrough: claims, burns and releases of passthrough
// devices; hostctl/parts/nics: the NICs' DHCP leases), registered as the
// daemon does (hostctl/daemon/parts.go) over the harness's hypervisor.

// registerParts gives e's controller the passthrough part (without an
// inventory until withInventory) and the nics part over net.
func registerParts(e *env, net nics.Network) {
	e.c.parts = []part.Part{boundPassthrough(e, nil), nics.New(net, "")}
}

// withInventory replaces e's passthrough part by one over inv.
func withInventory(e *env, inv passthrough.Inventory) {
	for i, p := range e.c.parts {
		if _, ok := p.(*passthrough.Part); ok {
			e.c.parts[i] = boundPassthrough(e, inv)
			return
		}
	}
	e.c.parts = append([]part.Part{boundPassthrough(e, inv)}, e.c.parts...)
}

func boundPassthrough(e *env, inv passthrough.Inventory) *passthrough.Part {
	p := passthrough.New(inv)
	p.Bind(e.c, slog.New(slog.DiscardHandler))
	return p
}
