package controller

import "github.com/vmeta/vmeta/hostctl/layout"

// The layout of an instance from its spec, flavor and image
// (hostctl/layout) as the core uses it: the flavor and image an instance
// names, its disks as an apply lays them out with the encryption
// decision. hostctl/ops resizes, rebuilds and encrypts attached disks
// with the same layout.

// DefaultEncryptionHost is the host's encryption formats and default
// format when Options.Encryption names none.
var DefaultEncryptionHost = layout.DefaultHost

// Layouts is the layout of this core's instances: over its flavor
// registry, its image directory and this host's encryption formats.
func (c *Controller) Layouts() *layout.Layout {
	l := &layout.Layout{Images: c.imageDir, Encryption: layout.Policy{Host: c.encHost}}
	if c.flavors != nil {
		l.Flavors = c.flavors
	}
	return l
}
