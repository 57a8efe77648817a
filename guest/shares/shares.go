// Package shares mounts and unmounts virtiofs shares
// (`mount -t virtiofs TAG DIR`, done with mount(2): the agent is a static
// binary and needs no mount command) and reads the mount table
// (/proc/self/mountinfo) to see what is mounted where.
package shares

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// FSType is the file system type of a virtiofs mount.
const FSType = "virtiofs"

// DefaultRoot is where shares are mounted: <root>/<tag>.
const DefaultRoot = "/mnt/shares"

// Mount is one line of the mount table.
type Mount struct {
	Source, Target, FSType string
}

// Mounter does the system calls; tests use a fake.
type Mounter interface {
	// Mounts returns the mount table.
	Mounts() ([]Mount, error)
	// Mount mounts virtiofs tag at dir (which exists).
	Mount(tag, dir string) error
	// Unmount unmounts dir.
	Unmount(dir string) error
}

// System is the real Mounter.
type System struct {
	// MountInfo is the mount table file; /proc/self/mountinfo when empty.
	MountInfo string
}

// Mounts implements Mounter.
func (s System) Mounts() ([]Mount, error) {
	p := s.MountInfo
	if p == "" {
		p = "/proc/self/mountinfo"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("mount table: %w", err)
	}
	return ParseMountInfo(b), nil
}

// ErrNoTag is wrapped by Mount's error when the host offers no virtiofs
// device with the tag (the kernel answers EINVAL or ENOENT: "virtio-fs:
// tag <x> not found").
var ErrNoTag = errors.New("no virtiofs device with this tag")

// ParseMountInfo parses /proc/self/mountinfo: "id parent major:minor root
// target options [optional fields...] - fstype source superoptions", with
// spaces, tabs, newlines and backslashes in paths written as \040, \011,
// \012, \134.
func ParseMountInfo(b []byte) []Mount {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+2 >= len(f) {
			continue
		}
		out = append(out, Mount{Target: unescape(f[4]), FSType: f[sep+1], Source: unescape(f[sep+2])})
	}
	return out
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountedAt returns the mount at target (the last one: mounts stack).
func MountedAt(ms []Mount, target string) (Mount, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Target == target {
			return ms[i], true
		}
	}
	return Mount{}, false
}

// TagMounts returns the targets where virtiofs tag is mounted.
func TagMounts(ms []Mount, tag string) []string {
	var out []string
	for _, m := range ms {
		if m.FSType == FSType && m.Source == tag {
			out = append(out, m.Target)
		}
	}
	return out
}
