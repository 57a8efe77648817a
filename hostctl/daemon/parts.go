package daemon

import (
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/passthrough"
	"github.com/vmeta/vmeta/hostctl/parts/watchdog"
	"github.com/vmeta/vmeta/hostctl/shares"
)

// Parts are the host features the daemon registers with the controller
// core (hostctl/part), in the order the core calls their phases. A new
// part is added here and answers every operation (parts_test.go checks).
// The share service (sh) is the shares part.
func Parts(inv passthrough.Inventory, sh *shares.Service) []part.Part {
	parts := []part.Part{
		passthrough.New(inv),
		watchdog.New(),
	}
	if sh != nil {
		parts = append(parts, sh)
	}
	return parts
}
