package cli

import (
	"fmt"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// liveMigrated is what `instance migrate --live` says once done.
func liveMigrated(name, to string, m types.Migration) string {
	return fmt.Sprintf("instance %s runs on %s (migrated live; libvirt's migration took %.1fs)", name, to, m.SwitchSeconds)
}
