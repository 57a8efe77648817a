package daemon

import (
	"log/slog"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/hostctl/view"
)

// instanceStates are the states instance list shows (hostctl/view), for
// hostctl's metrics: over this host's libvirt (none with --virt none)
// and the parts that keep the instances' faults and states.
func (h *hypervisor) instanceStates(host string, parts []part.Part, log *slog.Logger) view.States {
	s := view.States{Host: host, Log: log}
	if h.conn != nil {
		s.Domains = h.conn
	}
	for _, p := range parts {
		switch p := p.(type) {
		case *faults.Part:
			s.Faults = p
		case *vmstate.Part:
			s.Kept = p
		}
	}
	return s
}
