// Package hosts gives each hostctl its identity among the hosts that share
// one store, and lets it see the others: the host name kept in the data
// directory, a heartbeat record per host in the store, and the liveness
// rule that taking over another host's instance (adopt) depends on.
//
// Liveness compares a heartbeat's last-seen time, written with the beating
// host's clock, with the reader's clock: hosts sharing a store must keep
// their clocks in step (NTP), and DownAfter must be several beat intervals
// plus any skew.
package hosts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vmeta/vmeta/internal/atomicfile"
)

// NameFile is the file in the data directory that holds the host's name,
// written on the first start so that renaming the machine does not orphan
// its instances.
const NameFile = "host-name"

// MaxNameLen is the longest host name (a DNS name).
const MaxNameLen = 253

// CheckName reports whether name can name a host: 1 to MaxNameLen bytes of
// lower-case letters, digits, "-" and ".", starting and ending with a
// letter or digit (a DNS name, lower-cased; also a valid store key).
func CheckName(name string) error {
	if name == "" {
		return errors.New("host name: empty")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("host name %.40q… (%d bytes): longer than %d bytes", name, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("host name %q: character %q at byte %d is not a lower-case letter, a digit, \"-\" or \".\"", name, name[i:i+1], i)
		}
	}
	if !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return fmt.Errorf("host name %q: must start and end with a letter or digit", name)
	}
	return nil
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// Resolve returns the name of the host whose data directory is dataDir.
// The first start stores want (or, when want is empty, the machine's
// host name, lower-cased) in dataDir; later starts read it back, and a
// want that differs from the stored name is an error naming both: the
// data directory's instances belong to the stored host.
func Resolve(dataDir, want string) (string, error) {
	path := filepath.Join(dataDir, NameFile)
	stored, err := readName(path)
	switch {
	case err == nil:
		if want != "" && want != stored {
			return "", fmt.Errorf("--host %q: the data directory %s belongs to host %q (%s); "+
				"start with --host %s, or use another data directory", want, dataDir, stored, path, stored)
		}
		return stored, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	name := want
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("host name: %w (set one with --host)", err)
		}
		name = strings.ToLower(h)
	}
	if err := CheckName(name); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("host name: %w", err)
	}
	if err := atomicfile.CreateExclusive(path, []byte(name+"\n"), 0o600); err != nil {
		if errors.Is(err, fs.ErrExist) { // another process started first: take its answer
			return Resolve(dataDir, want)
		}
		return "", fmt.Errorf("host name: %w", err)
	}
	return name, nil
}

func readName(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(b))
	if err := CheckName(name); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return name, nil
}
