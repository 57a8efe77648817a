package daemon

import (
	"log/slog"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/configdrive"
)

// mediaPart is the config-drive media (hostctl/parts/configdrive) over
// the hypervisor, for the instance directories of dataDir: the cdrom of
// a running domain gets every publish's drive. None for --virt none
// (no domain, no medium).
func (h *hypervisor) mediaPart(dataDir string, log *slog.Logger) []part.Part {
	if h.conn == nil {
		return nil
	}
	return []part.Part{configdrive.New(h.conn, dataDir, log)}
}
