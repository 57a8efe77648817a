package controller

import (
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/configdrive"
)

// The config-drive media are a part (hostctl/parts/configdrive) the
// daemon registers with a hypervisor; the harness registers it with the
// others (registerParts) over its hypervisor, and the media tests swap
// that hypervisor (withMedia).

// mediumFileRE matches the name of a swapped-in medium, disk.config.<N>.
var mediumFileRE = configdrive.MediumFileRE

// mediaPart is the config-drive media part over hv, the harness's
// hypervisor (none when hv has no media to change).
func mediaPart(e *env, hv any) part.Part {
	h, _ := hv.(configdrive.Hypervisor)
	return configdrive.New(h, e.c.dataDir, nil)
}

// withMedia replaces e's config-drive media part by one over hv.
func withMedia(e *env, hv configdrive.Hypervisor) {
	p := configdrive.New(hv, e.c.dataDir, nil)
	for i, q := range e.c.parts {
		if _, ok := q.(*configdrive.Part); ok {
			e.c.parts[i] = p
			return
		}
	}
	e.c.parts = append(e.c.parts, p)
}
