package virt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/vmeta/vmeta/internal/model"
)

// fieldErr is one refused part of an instance, named by its spec field
// ("disks[2].bus"). The checks gather them (errors.Join); specError turns
// them into the one *model.SpecError the exported functions return.
func fieldErr(field, format string, args ...any) error {
	return model.FieldError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// specError returns err — field errors (fieldErr), alone or joined — as
// one *model.SpecError listing them all, so that callers answer it as a
// refused spec (the admin API: 400, one entry per field). An err with
// anything else in it (a bad Options value is not the spec's fault) is
// returned as it is.
func specError(err error) error {
	if err == nil {
		return nil
	}
	fields, ok := fieldErrors(err)
	if !ok {
		return err
	}
	return &model.SpecError{Errors: fields}
}

// fieldErrors flattens err into its field errors; false when err holds
// anything else.
func fieldErrors(err error) ([]model.FieldError, bool) {
	// Only err itself counts, not what it wraps (a wrapped field error
	// carries context that must stay): interface assertions, not errors.As.
	if x, ok := err.(interface{ FieldErrors() []model.FieldError }); ok {
		return x.FieldErrors(), true
	}
	if x, ok := err.(interface{ Unwrap() []error }); ok {
		var out []model.FieldError
		for _, e := range x.Unwrap() {
			fs, ok := fieldErrors(e)
			if !ok {
				return nil, false
			}
			out = append(out, fs...)
		}
		return out, true
	}
	return nil, false
}

// MaxNameLength bounds an instance (domain) name. libvirt keeps
// /etc/libvirt/qemu/<name>.xml and files derived from the name
// (<name>.save, <name>_VARS.fd, <name>.log); a file name holds at most 255
// bytes.
const MaxNameLength = 200

// ValidateName checks that libvirt accepts name as a domain name, and that
// it is safe as the file name libvirt derives from it: not empty, at most
// MaxNameLength bytes of UTF-8, no '/', no control characters (libvirt
// refuses '\n'), not "." or "..".
func ValidateName(name string) error {
	const f = "name"
	switch {
	case name == "":
		return fieldErr(f, "must not be empty")
	case len(name) > MaxNameLength:
		return fieldErr(f, "is %d bytes; libvirt domain names here are limited to %d (they become file names)", len(name), MaxNameLength)
	case !utf8.ValidString(name):
		return fieldErr(f, "%q is not valid UTF-8", name)
	case strings.ContainsRune(name, '/'):
		return fieldErr(f, "%q contains '/', which libvirt refuses in a domain name (it is a file name)", name)
	case name == "." || name == "..":
		return fieldErr(f, "%q is reserved (a directory name)", name)
	}
	if i := strings.IndexFunc(name, unicode.IsControl); i >= 0 {
		return fieldErr(f, "%q contains the control character %U at byte %d", name, []rune(name[i:])[0], i)
	}
	return nil
}

// Machine families BuildDomain knows the buses of.
const (
	MachineQ35 = "q35"
	MachinePC  = "pc" // i440fx
)

// machineFamily maps a machine type ("q35", "pc-q35-7.2", "pc",
// "pc-i440fx-7.2") to its family.
func machineFamily(machine string) string {
	switch {
	case machine == "q35" || strings.Contains(machine, "q35"):
		return MachineQ35
	case machine == "pc" || strings.Contains(machine, "i440fx"):
		return MachinePC
	}
	return machine
}

// CheckDiskBus reports whether a disk on bus can be attached to a domain of
// the given machine type. q35 has no IDE controller (libvirt: "IDE
// controllers are unsupported for this QEMU binary or machine type"); its
// built-in AHCI controller takes SATA disks instead.
func CheckDiskBus(machine, bus string) error {
	switch bus {
	case model.DiskBusVirtio, model.DiskBusSCSI, model.DiskBusSATA, model.DiskBusUSB:
		return nil
	case model.DiskBusIDE:
		if machineFamily(machine) == MachineQ35 {
			return fmt.Errorf("bus ide is not available on machine type %s (q35 has no IDE controller; use sata)", machine)
		}
		return nil
	case "":
		return errors.New("bus is empty")
	}
	return fmt.Errorf("unknown bus %q (want virtio, scsi, sata, ide or usb)", bus)
}

// Serial limits per bus. QEMU silently truncates a virtio-blk serial to 20
// bytes (VIRTIO_BLK_ID_BYTES) and an ATA serial (SATA, IDE) to 20 (the
// IDENTIFY field); scsi-hd takes up to 36. A truncated serial would no
// longer match what the metadata says, so longer ones are refused.
func maxSerial(bus string) int {
	if bus == model.DiskBusSCSI {
		return 36
	}
	return 20
}

// serialRE is what survives libvirt and QEMU unchanged: libvirt escapes
// other characters on the QEMU command line (a space reaches the guest as
// "\ "), so they are refused.
var serialRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// CheckSerial checks a disk serial for bus.
func CheckSerial(bus, serial string) error {
	if serial == "" {
		return nil
	}
	if n := maxSerial(bus); len(serial) > n {
		return fmt.Errorf("%q is %d bytes; QEMU truncates %s disk serials to %d, so the guest would not see it", serial, len(serial), bus, n)
	}
	if !serialRE.MatchString(serial) {
		return fmt.Errorf("%q may contain only ASCII letters, digits, '.', '_' and '-' (libvirt escapes anything else on the QEMU command line)", serial)
	}
	return nil
}

// diskNameRE is a libvirt target dev name; the prefix must match the bus.
var diskNameRE = regexp.MustCompile(`^(vd|sd|hd)[a-z]{1,3}$`)

// CheckDiskName checks a disk's target name (vda, sdb, hdc) against its bus:
// libvirt derives the drive address of a SCSI or SATA disk from the letters,
// and Linux names the device by the prefix.
func CheckDiskName(bus, name string) error {
	m := diskNameRE.FindStringSubmatch(name)
	if m == nil {
		return fmt.Errorf("%q is not a target device name like vda, sdb or hdc", name)
	}
	want := map[string]string{
		model.DiskBusVirtio: "vd",
		model.DiskBusSCSI:   "sd",
		model.DiskBusSATA:   "sd",
		model.DiskBusUSB:    "sd",
		model.DiskBusIDE:    "hd",
	}[bus]
	if want != "" && m[1] != want {
		return fmt.Errorf("%q does not fit bus %s: names on that bus start with %q", name, bus, want)
	}
	return nil
}

// ResolveInDataDir resolves p (relative to dataDir, or absolute) to an
// absolute path and checks that it stays inside dataDir: no ".." escape and
// no symbolic link (in any existing component) leading out. p need not
// exist yet; its existing ancestors are resolved. The returned path has its
// symbolic links resolved, so what is checked is what libvirt will open.
func ResolveInDataDir(dataDir, p string) (string, error) {
	if dataDir == "" {
		return "", errors.New("no data directory configured")
	}
	if p == "" {
		return "", errors.New("path is empty")
	}
	root, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("data directory %s: %w", dataDir, err)
	}
	if root, err = resolveExisting(root); err != nil {
		return "", fmt.Errorf("data directory %s: %w", dataDir, err)
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(dataDir, p)
	}
	if abs, err = filepath.Abs(abs); err != nil {
		return "", fmt.Errorf("path %s: %w", p, err)
	}
	real, err := resolveExisting(abs)
	if err != nil {
		return "", fmt.Errorf("path %s: %w", p, err)
	}
	if !within(root, real) {
		if real != abs {
			return "", fmt.Errorf("path %s resolves to %s, outside the data directory %s", p, real, root)
		}
		return "", fmt.Errorf("path %s is outside the data directory %s", p, root)
	}
	if real == root {
		return "", fmt.Errorf("path %s is the data directory itself, not a file in it", p)
	}
	return real, nil
}

// resolveExisting resolves the symbolic links of the longest existing prefix
// of the absolute, clean path p and appends the rest unchanged.
func resolveExisting(p string) (string, error) {
	var rest []string
	cur := p
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			for i := len(rest) - 1; i >= 0; i-- {
				real = filepath.Join(real, rest[i])
			}
			return real, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		// A dangling symbolic link would be created through by whoever
		// writes the file: refuse it rather than guess its target.
		if fi, lerr := os.Lstat(cur); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%s is a dangling symbolic link", cur)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = append(rest, filepath.Base(cur))
		cur = parent
	}
}

func within(root, p string) bool {
	if p == root {
		return true
	}
	r := root
	if !strings.HasSuffix(r, string(filepath.Separator)) {
		r += string(filepath.Separator)
	}
	return strings.HasPrefix(p, r)
}
