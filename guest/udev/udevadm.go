package udev

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultRunDir is udev's runtime directory: the control socket and the
// database (data/) live there.
const DefaultRunDir = "/run/udev"

// Entry is one device's record in udev's database.
type Entry struct {
	// Props are the E: lines (properties udev added beyond the kernel's).
	Props map[string]string
	// Links are the S: lines (symlinks under /dev, without "/dev/").
	Links []string
}

// HasLink reports whether the entry has link name (relative to /dev).
func (e Entry) HasLink(name string) bool {
	for _, l := range e.Links {
		if l == name {
			return true
		}
	}
	return false
}

// BlockID and NetID name a device's database file.
func BlockID(major, minor string) string { return "b" + major + ":" + minor }
func NetID(ifindex int) string           { return "n" + strconv.Itoa(ifindex) }

// ParseEntry parses a database file. Unknown line types are skipped;
// udev's format is line-based ("E:KEY=value", "S:link", "I:usec", ...).
func ParseEntry(b []byte) Entry {
	e := Entry{Props: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 || line[1] != ':' {
			continue
		}
		switch line[0] {
		case 'E':
			if k, v, ok := strings.Cut(line[2:], "="); ok {
				e.Props[k] = v
			}
		case 'S':
			e.Links = append(e.Links, line[2:])
		}
	}
	return e
}

// DB reads udev's database.
type DB struct {
	// RunDir is udev's runtime directory (DefaultRunDir when empty).
	RunDir string
}

func (db DB) dir() string {
	if db.RunDir == "" {
		return DefaultRunDir
	}
	return db.RunDir
}

// Running reports whether udevd is running (its control socket exists).
func (db DB) Running() bool {
	_, err := os.Stat(filepath.Join(db.dir(), "control"))
	return err == nil
}

// Entry returns the database entry of device id (BlockID, NetID); a
// device udev has not processed has an empty entry.
func (db DB) Entry(id string) (Entry, error) {
	b, err := os.ReadFile(filepath.Join(db.dir(), "data", id))
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{Props: map[string]string{}}, nil
	}
	if err != nil {
		return Entry{}, fmt.Errorf("udev database: %w", err)
	}
	return ParseEntry(b), nil
}

// Runner runs a command and returns its combined output.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Exec runs commands with os/exec.
func Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// Udevadm drives udev through the udevadm command.
type Udevadm struct {
	// Path of udevadm; looked up in PATH (and /bin, /sbin, /usr/bin) when
	// empty.
	Path string
	// Run runs it; Exec when nil.
	Run Runner
}

func (u *Udevadm) run(ctx context.Context, args ...string) error {
	p := u.Path
	if p == "" {
		p = findUdevadm()
	}
	run := u.Run
	if run == nil {
		run = Exec
	}
	out, err := run(ctx, p, args...)
	if err != nil {
		return fmt.Errorf("udevadm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func findUdevadm() string {
	if p, err := exec.LookPath("udevadm"); err == nil {
		return p
	}
	for _, p := range []string{"/bin/udevadm", "/sbin/udevadm", "/usr/bin/udevadm", "/usr/sbin/udevadm"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "udevadm"
}

// Reload makes udevd read the rules again.
func (u *Udevadm) Reload(ctx context.Context) error {
	return u.run(ctx, "control", "--reload")
}

// Trigger sends a change event for each sysfs path (absolute, /sys/...)
// and waits until udevd has processed those events, not the whole queue:
// `udevadm trigger --settle` (udev 238 and later) waits for the events it
// queued. At boot the queue still holds the coldplug events of every
// device the kernel is announcing, and a global `udevadm settle` after
// the trigger held the agent's unit (and local-fs-pre.target behind it)
// for 6-7 s under TCG. A udevadm without --settle gets the trigger, then a
// global settle. ctx bounds the wait.
func (u *Udevadm) Trigger(ctx context.Context, sysPaths []string) error {
	if len(sysPaths) == 0 {
		return nil
	}
	err := u.run(ctx, append([]string{"trigger", "--action=change", "--settle"}, sysPaths...)...)
	if err == nil || !strings.Contains(err.Error(), "--settle") || ctx.Err() != nil {
		return err
	}
	// "unrecognized option '--settle'": an old udevadm.
	if err := u.run(ctx, append([]string{"trigger", "--action=change"}, sysPaths...)...); err != nil {
		return err
	}
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	return u.Settle(ctx, timeout)
}

// Settle waits until udevd has processed every queued event (at most
// timeout, rounded up to a second).
func (u *Udevadm) Settle(ctx context.Context, timeout time.Duration) error {
	return u.run(ctx, "settle", "--timeout="+strconv.Itoa(int((timeout+time.Second-1)/time.Second)))
}
