package controller

import (
	"slices"

	"github.com/vmeta/vmeta/hostctl/part"
)

// Parts returns the registered parts, in registration order: the
// operations outside the core (hostctl/ops) ask those with a phase of
// their own (the nics part claims a hot-plugged NIC's MAC address).
func (c *Controller) Parts() []part.Part { return slices.Clone(c.parts) }
