package daemon

import (
	"github.com/vmeta/vmeta/hostctl/diskrotate"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/passthrough"
	"github.com/vmeta/vmeta/hostctl/parts/watchdog"
)

// Parts are the host features the daemon registers with the controller
// core (hostctl/part), in the order the core calls their phases. A new
// part is added here and answers every operation (parts_test.go checks).
// keyRecords is the key rotation engine (nil: none), whose records of an
// instance go with it.
func Parts(inv passthrough.Inventory, keyRecords diskrotate.Forgetter) []part.Part {
	return []part.Part{
		passthrough.New(inv),
		watchdog.New(),
		diskrotate.NewForget(keyRecords),
	}
}
