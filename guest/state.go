package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vmeta/vmeta/guest/source"
	"github.com/vmeta/vmeta/internal/atomicfile"
)

// DefaultStateDir holds the agent's state: volatile (a reboot starts from
// nothing, like the rules in /run/udev/rules.d).
const DefaultStateDir = "/run/vmeta-agent"

// stateFile and lockFile live in the state directory.
const (
	stateFile = "state.json"
	lockFile  = "lock"
)

// State is what the last pass did: the document it applied, each entry's
// outcome, and what the agent itself added (alternative names, mounts),
// which is all it ever removes. status prints it.
type State struct {
	// Time is when the last pass ended.
	Time time.Time `json:"time"`
	// Origin, UUID and Digest identify the document applied.
	Origin string `json:"origin"`
	UUID   string `json:"uuid,omitempty"`
	Digest string `json:"digest"`
	// Source is the kind of transport it came from (firmware, config
	// drive, metadata service) and Revision the metadata revision it
	// carries (0: none).
	Source   string `json:"source,omitempty"`
	Revision int64  `json:"revision,omitempty"`
	// Sources says what each transport gave in that pass.
	Sources []source.SourceResult `json:"sources,omitempty"`
	// Devices has one entry per device of the document.
	Devices []DeviceState `json:"devices"`
	// Ignored lists entries of unknown types.
	Ignored []string `json:"ignored,omitempty"`
	// Problems lists everything not applied and why.
	Problems []string `json:"problems,omitempty"`
	// AltNames are the alternative names the agent added.
	AltNames []AddedAltName `json:"altnames,omitempty"`
	// Mounts are the shares the agent mounted.
	Mounts []AgentMount `json:"mounts,omitempty"`
	// LastError is the latest failure to read the metadata (nothing was
	// changed then); cleared by the next successful pass.
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
}

// DeviceState is one entry of the document and what became of it.
type DeviceState struct {
	Type      string   `json:"type"`
	Bus       string   `json:"bus"`
	Address   string   `json:"address"`
	MAC       string   `json:"mac,omitempty"`
	Serial    string   `json:"serial,omitempty"`
	Tags      []string `json:"tags,omitempty"`
	Encrypted bool     `json:"encrypted,omitempty"`
	ShareTag  string   `json:"share_tag,omitempty"`
	// Status is match.Status, or for shares "mounted", "absent",
	// "failed".
	Status string `json:"status"`
	// Node is the matched disk's device node (/dev/vdb), Interface the
	// matched NIC's name (ens4), MountPoint where a share is mounted.
	Node       string `json:"node,omitempty"`
	Interface  string `json:"interface,omitempty"`
	IfIndex    int    `json:"ifindex,omitempty"`
	MountPoint string `json:"mount_point,omitempty"`
	// SysPath is the matched device's DEVPATH.
	SysPath string   `json:"sys_path,omitempty"`
	By      []string `json:"matched_by,omitempty"`
	Reason  string   `json:"reason,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// AddedAltName is an alternative interface name the agent added.
type AddedAltName struct {
	IfIndex int    `json:"ifindex"`
	MAC     string `json:"mac"`
	Name    string `json:"name"`
}

// AgentMount is a share the agent mounted.
type AgentMount struct {
	Tag string `json:"tag"`
	Dir string `json:"dir"`
}

// ErrNoState is returned by ReadState before the first pass.
var ErrNoState = errors.New("the agent has not applied any metadata yet (no state)")

// ReadState reads the state the last pass wrote in dir.
func ReadState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoState
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read state %s: %w", filepath.Join(dir, stateFile), err)
	}
	return &s, nil
}

func writeState(dir string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	_, err = atomicfile.WriteIfChanged(filepath.Join(dir, stateFile), append(b, '\n'), 0o644)
	return err
}

// lock takes the state directory's lock, so that a one-shot apply (a
// cloud-init hook) and the daemon never interleave their passes.
func lock(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}
