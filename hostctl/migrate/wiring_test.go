package migrate

import (
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/internal/keys"
)

// The real parts fill the roles Host needs.
var (
	_ Core        = (*controller.Controller)(nil)
	_ DiskRecords = (*disks.Part)(nil)
	_ Keys        = (*keys.Manager)(nil)
	_ Images      = (*encryption.Tool)(nil)
)
