package hosts

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vmeta/vmeta/internal/store"
)

// ErrHostHeld is returned (wrapped) by a beat when the host's heartbeat
// record is held by another live process: a second `hostctl serve --host
// X` on the same store. Its message names the holder.
var ErrHostHeld = errors.New("host name held by another process")

// Holder identifies the process that holds a host name: the heartbeat
// record is its lease. Another process may take the name over only when
// the holder stopped cleanly, went silent for longer than the down-after
// time, or ran on the same machine with the same data directory (the new
// process holds that directory's lock, so the old one is gone: a restart
// after a crash).
type Holder struct {
	// ID is random per process: it tells this process's record from any
	// other's, even one with the same pid on another machine.
	ID      string    `json:"id"`
	PID     int       `json:"pid"`
	Machine string    `json:"machine"`
	DataDir string    `json:"data_dir,omitempty"`
	Started time.Time `json:"started"`
}

// NewHolder describes this process. dataDir is the data directory whose
// lock the caller holds ("" when it holds none: then a fresh record of
// another process is never taken over).
func NewHolder(dataDir string) *Holder {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	machine, _ := os.Hostname()
	if dataDir != "" {
		if abs, err := filepath.Abs(dataDir); err == nil {
			dataDir = abs
		}
	}
	return &Holder{ID: hex.EncodeToString(b), PID: os.Getpid(), Machine: machine, DataDir: dataDir, Started: time.Now().UTC()}
}

func (h *Holder) String() string {
	return fmt.Sprintf("hostctl pid %d on %s (data directory %s, started %s)", h.PID, h.Machine, h.DataDir, h.Started.Format(time.RFC3339))
}

// mayTake reports whether h may write the heartbeat record cur: nil, or
// an error wrapping ErrHostHeld that names the holder.
func (h *Holder) mayTake(cur store.Record, now time.Time, downAfter time.Duration) error {
	hb, err := decode(cur)
	if err != nil {
		return err
	}
	if downAfter <= 0 {
		downAfter = DefaultDownAfter
	}
	other := hb.Holder
	switch age := now.Sub(hb.LastSeen); {
	case other != nil && other.ID == h.ID:
		return nil
	case hb.Stopped || age > downAfter:
		return nil
	case other != nil && h.DataDir != "" && other.Machine == h.Machine && other.DataDir == h.DataDir:
		return nil // the same data directory, whose lock this process holds
	case other == nil:
		return fmt.Errorf("%w: host %s has a live heartbeat (last seen %s ago) from a process that does not name itself (an older hostctl): one hostctl serve per host name on a store; stop it, or wait %s after it stopped",
			ErrHostHeld, hb.Host, age.Round(time.Millisecond), downAfter)
	default:
		return fmt.Errorf("%w: host %s is held by %s, last seen %s ago: one hostctl serve per host name on a store; stop that one, choose another --host, or wait until it has been silent for --host-down-after (%s)",
			ErrHostHeld, hb.Host, other, age.Round(time.Millisecond), downAfter)
	}
}
