package nfsguest

// Report is what mountcheck (the program the test guest runs) saw, written
// as one JSON line to the guest's second serial port.
type Report struct {
	// Steps are hostctl's mount calls, in order.
	Steps []Step `json:"steps"`
	// Wrote is the content mountcheck wrote to GuestFile through the
	// mount after the first Acquire; WriteErr why it could not.
	Wrote    string `json:"wrote,omitempty"`
	WriteErr string `json:"write_err,omitempty"`
	// Rebuilt is what a fresh Mounts (hostctl after a restart) found
	// mounted by reading /proc/self/mountinfo while the share was
	// mounted; RebuildErr why it could not.
	Rebuilt    []string `json:"rebuilt"`
	RebuildErr string   `json:"rebuild_err,omitempty"`
}

// Step is one call of hostctl's Mounts (Acquire or Release for an
// instance) and what the guest saw right after it.
type Step struct {
	Name string `json:"name"`
	// Err is the call's error.
	Err string `json:"err,omitempty"`
	// Mounts are the entries of /proc/self/mountinfo under the shares'
	// base directory.
	Mounts []Mount `json:"mounts"`
	// Users are the instances Mounts holds a reference for.
	Users []string `json:"users"`
	// Read is HostFile read through the share's directory; ReadErr why it
	// could not be.
	Read    string `json:"read,omitempty"`
	ReadErr string `json:"read_err,omitempty"`
}

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	Point   string `json:"point"`
	FSType  string `json:"fstype"`
	Source  string `json:"source"`
	Options string `json:"options"`
	// Super are the file system's own options (the last field).
	Super string `json:"super"`
}

// The files of the test: the host writes HostFile into the export before
// the guest boots, the guest writes GuestFile through the mount.
const (
	HostFile  = "from-host.txt"
	GuestFile = "from-guest.txt"
)

// ReportPrefix starts the report's line.
const ReportPrefix = "nfsguest-report: "
