package shares

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// Runner runs a host command (mount, umount) and returns its combined
// output. ExecRunner runs it for real; a test may record instead.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ExecRunner runs commands with os/exec.
type ExecRunner struct{}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// NFSMountOptions are the options of every NFS mount: read-write (the
// specification: a share cannot be mounted read-only and read-write at
// once; a guest wanting read-only mounts it so), hard, with the defaults
// of the kernel for the version.
const NFSMountOptions = "rw,hard,noexec,nosuid,nodev"

// Mounts is the host side of NFS shares: each share is mounted once per
// host, at <base>/<share-id>, while any instance on the host uses it
// (reference counts by instance), and unmounted when the last one stops.
// The counts are kept in memory and rebuilt at start-up from the active
// mappings in the store and /proc/self/mountinfo (Rebuild).
type Mounts struct {
	base      string
	run       Runner
	log       *slog.Logger
	mountinfo string
	// ceph mounts the CephFS shares (nil: none on this host).
	ceph *CephX

	mu   sync.Mutex
	refs map[string]map[string]bool // share ID -> instance UUIDs
}

// NewMounts returns the mounts under base (created when needed).
func NewMounts(base string, run Runner, log *slog.Logger) *Mounts {
	if run == nil {
		run = ExecRunner{}
	}
	return &Mounts{base: base, run: run, log: log, mountinfo: "/proc/self/mountinfo", refs: map[string]map[string]bool{}}
}

// Dir is where share id is mounted on the host.
func (m *Mounts) Dir(id string) string { return filepath.Join(m.base, id) }

// Users returns the instances holding a reference to share id.
func (m *Mounts) Users(id string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for u := range m.refs[id] {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// Acquire makes sure the share is mounted for instance: it mounts the
// export unless the share is mounted already (for another instance: then
// it is reused, with a log line). The export never appears in a log line
// or an error (mount's output is redacted).
func (m *Mounts) Acquire(ctx context.Context, id, export, instance string) error {
	return m.acquire(ctx, id, types.ShareProtoNFS, export, instance)
}

// acquire is Acquire for a share of proto (NFS or CephFS).
func (m *Mounts) acquire(ctx context.Context, id, proto, export, instance string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	users := m.refs[id]
	mounted, err := m.mounted(id)
	if err != nil {
		return err
	}
	switch {
	case mounted && len(users) > 0:
		m.log.Warn("share already mounted on this host for another instance; reusing the mount", "share", id, "instance", instance, "users", len(users))
	case mounted:
		m.log.Info("share already mounted on this host; reusing the mount", "share", id, "instance", instance)
	default:
		dir := m.Dir(id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("mount share %s: %w", id, err)
		}
		if proto == ProtoCephFS {
			if err := m.mountCephFS(ctx, id, export, dir); err != nil {
				return err
			}
		} else {
			out, err := m.run.Run(ctx, "mount", "-t", "nfs", "-o", NFSMountOptions, export, dir)
			if err != nil {
				return fmt.Errorf("mount share %s at %s: %w: %s", id, dir, err, redact(out, export))
			}
		}
		m.log.Info("share mounted on the host", "share", id, "dir", dir, "instance", instance)
	}
	if users == nil {
		users = map[string]bool{}
		m.refs[id] = users
	}
	users[instance] = true
	return nil
}

// Release drops instance's reference to the share and unmounts it when no
// instance on the host uses it any more. A failed unmount keeps no
// reference (the reconciler retries the unmount: Sweep).
func (m *Mounts) Release(ctx context.Context, id, instance string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.refs[id], instance)
	if len(m.refs[id]) > 0 {
		m.log.Info("share still used by other instances on this host; mount kept", "share", id, "users", len(m.refs[id]))
		return nil
	}
	delete(m.refs, id)
	return m.unmount(ctx, id)
}

func (m *Mounts) unmount(ctx context.Context, id string) error {
	mounted, err := m.mounted(id)
	if err != nil || !mounted {
		return err
	}
	dir := m.Dir(id)
	if out, err := m.run.Run(ctx, "umount", dir); err != nil {
		return fmt.Errorf("unmount share %s at %s: %w: %s", id, dir, err, strings.TrimSpace(string(out)))
	}
	m.log.Info("share unmounted from the host", "share", id, "dir", dir)
	if m.ceph != nil {
		m.ceph.Unmounted(ctx, id)
	}
	return nil
}

// mountCephFS mounts a CephFS share with the host's CephX client.
func (m *Mounts) mountCephFS(ctx context.Context, id, export, dir string) error {
	if m.ceph == nil {
		return fmt.Errorf("mount share %s: %w", id, ErrCephXNotConfigured)
	}
	exp, err := ParseCephFSExport(export)
	if err != nil {
		return fmt.Errorf("mount share %s: the stored export location is not a CephFS export", id)
	}
	if err := m.ceph.Mount(ctx, id, exp, dir); err != nil {
		return fmt.Errorf("mount share %s at %s: %w", id, dir, err)
	}
	return nil
}

// Rebuild sets the reference counts from the instances that use each
// share on this host now (the active mappings in the store), and returns
// the shares mounted under the base directory (/proc/self/mountinfo).
// With replace the counts are rebuilt from users alone (at start-up);
// otherwise users are added to the counts kept (a start in progress holds
// a reference its mapping does not show yet).
func (m *Mounts) Rebuild(users map[string][]string, replace bool) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if replace {
		m.refs = map[string]map[string]bool{}
	}
	for id, insts := range users {
		for _, u := range insts {
			if m.refs[id] == nil {
				m.refs[id] = map[string]bool{}
			}
			m.refs[id][u] = true
		}
	}
	return m.mountedShares()
}

// Sweep unmounts every share mounted under the base directory that no
// instance on this host uses (left by a crash, or by an unmount that
// failed), and returns what it could not unmount.
func (m *Mounts) Sweep(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids, err := m.mountedShares()
	if err != nil {
		return err
	}
	var errs []string
	for _, id := range ids {
		if len(m.refs[id]) > 0 {
			continue
		}
		m.log.Warn("share mounted on the host with no instance using it; unmounting", "share", id)
		if err := m.unmount(ctx, id); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("sweep share mounts: %s", strings.Join(errs, "; "))
	}
	return nil
}

// mounted reports whether share id is mounted at its directory.
func (m *Mounts) mounted(id string) (bool, error) {
	ids, err := m.mountedShares()
	if err != nil {
		return false, err
	}
	for _, x := range ids {
		if x == id {
			return true, nil
		}
	}
	return false, nil
}

// mountedShares lists the share IDs mounted under the base directory.
func (m *Mounts) mountedShares() ([]string, error) {
	f, err := os.Open(m.mountinfo)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	base := m.base
	if real, err := filepath.EvalSymlinks(base); err == nil {
		base = real
	}
	points, err := mountPoints(f)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range points {
		if filepath.Dir(p) == base || filepath.Dir(p) == m.base {
			out = append(out, filepath.Base(p))
		}
	}
	sort.Strings(out)
	return out, nil
}

// mountPoints parses /proc/self/mountinfo (proc(5)): the fifth field is
// the mount point, with space, tab, newline and backslash octal-escaped.
func mountPoints(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		out = append(out, unescapeMountinfo(f[4]))
	}
	return out, sc.Err()
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1:i+4]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < '0' || s[i] > '7' {
			return false
		}
	}
	return true
}

// redact removes the export from a command's output: it is admin-only,
// and errors end up in logs.
func redact(out []byte, export string) string {
	s := strings.TrimSpace(string(out))
	if export != "" {
		s = strings.ReplaceAll(s, export, "<export>")
		if host, _, ok := strings.Cut(export, ":/"); ok && host != "" {
			s = strings.ReplaceAll(s, host, "<server>")
		}
	}
	return s
}

// forgetCephMounts deletes the CephFS mount records of shares not
// mounted under the base directory (an unmount that finished before a
// crash deleted its record), holding the mounts' lock so that no mount
// is under way: a stale record would keep its generation from the prune.
func (m *Mounts) forgetCephMounts(ctx context.Context) error {
	if m.ceph == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ids, err := m.mountedShares()
	if err != nil {
		return err
	}
	gens, err := m.ceph.MountGenerations(ctx)
	if err != nil {
		return err
	}
	for share := range gens {
		if !slices.Contains(ids, share) {
			m.log.Info("CephFS mount record of a share no longer mounted dropped", "share", share)
			m.ceph.Unmounted(ctx, share)
		}
	}
	return nil
}
