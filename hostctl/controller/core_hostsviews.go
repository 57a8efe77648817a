package controller

import (
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/view"
)

// shown is how instance list shows the states of instances (hostctl/view,
// which the daemon hands hostctl's metrics too), over this core's
// hypervisor and parts.
func (c *Controller) shown() view.States {
	s := view.States{Host: c.hostName, Kept: c.states(), Log: c.log} // core_vmstate.go
	if c.domains != nil {
		s.Domains = c.domains
	}
	s.Faults, _ = part.First[view.Faults](c.parts, "")
	return s
}
