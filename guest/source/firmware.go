package source

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/vmeta/vmeta/internal/metadata/wire"
	"github.com/vmeta/vmeta/internal/uuid"
)

// DefaultFirmwareDir is where Linux's qemu_fw_cfg module lists the fw_cfg
// files by name: by_name/<name>/raw is the content, by_name/<name>/size its
// length.
const DefaultFirmwareDir = "/sys/firmware/qemu_fw_cfg"

// ErrNoFirmware is wrapped by Firmware.Fetch when the guest has no fw_cfg
// device, or the host put no vmeta entries into it.
var ErrNoFirmware = errors.New("no firmware metadata")

// Firmware reads the document from QEMU's firmware configuration device:
// the entries hostctl writes (wire.FirmwareDevices, FirmwareUUID,
// FirmwareRevision), read from sysfs. It needs no mount and no network,
// only the qemu_fw_cfg module, which it loads when sysfs has no
// qemu_fw_cfg directory (once per process).
type Firmware struct {
	// Dir is the qemu_fw_cfg sysfs directory; DefaultFirmwareDir when
	// empty.
	Dir string
	// Load loads the qemu_fw_cfg module; LoadFirmwareModule when nil.
	Load func(ctx context.Context) error

	once    sync.Once
	loadErr error
}

func (f *Firmware) dir() string {
	if f.Dir != "" {
		return f.Dir
	}
	return DefaultFirmwareDir
}

func (f *Firmware) String() string { return "firmware (fw_cfg " + f.dir() + ")" }

// Fetch reads the three entries and parses them like meta_data.json: the
// devices document is checked against the same schema. A missing entry,
// one cut short (fewer bytes than its size, no final newline), or one that
// does not parse is an error wrapping ErrInvalid; no fw_cfg device, or no
// vmeta entry at all, wraps ErrNoFirmware.
func (f *Firmware) Fetch(ctx context.Context) (*Document, error) {
	dir := f.dir()
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		f.once.Do(func() {
			load := f.Load
			if load == nil {
				load = LoadFirmwareModule
			}
			f.loadErr = load(ctx)
		})
		if _, err := os.Stat(dir); err != nil {
			if f.loadErr != nil {
				return nil, fmt.Errorf("%w: %s does not exist and the qemu_fw_cfg module could not be loaded: %w", ErrNoFirmware, dir, f.loadErr)
			}
			return nil, fmt.Errorf("%w: %s does not exist (qemu_fw_cfg loaded; not a QEMU guest?)", ErrNoFirmware, dir)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	read := func(name string) ([]byte, error) { return readFirmwareEntry(dir, name) }
	devs, err := read(wire.FirmwareDevices)
	if errors.Is(err, fs.ErrNotExist) {
		if _, rerr := read(wire.FirmwareRevision); errors.Is(rerr, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: fw_cfg has no %s entries (the host does not publish them: hostctl serve --firmware-metadata off, or another host)",
				ErrNoFirmware, strings.TrimSuffix(wire.FirmwarePrefix, "/"))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("firmware: %w: %w", ErrInvalid, err)
	}
	revRaw, err := read(wire.FirmwareRevision)
	if err != nil {
		return nil, fmt.Errorf("firmware: %w: %w", ErrInvalid, err)
	}
	rev, err := wire.ParseFirmwareRevision(revRaw)
	if err != nil {
		return nil, fmt.Errorf("firmware: %w: %w", ErrInvalid, err)
	}
	uuidRaw, err := read(wire.FirmwareUUID)
	if err != nil {
		return nil, fmt.Errorf("firmware: %w: %w", ErrInvalid, err)
	}
	id, err := wire.ParseFirmwareLine(wire.FirmwareUUID, uuidRaw)
	if err == nil && !uuid.Valid(id) {
		err = fmt.Errorf("firmware entry %s: %q is not a uuid", wire.FirmwareUUID, id)
	}
	if err != nil {
		return nil, fmt.Errorf("firmware: %w: %w", ErrInvalid, err)
	}
	doc, err := ParseFirmware(devs, id, rev)
	if err != nil {
		return nil, fmt.Errorf("firmware: %w", err)
	}
	doc.Origin = "firmware (fw_cfg " + wire.FirmwarePrefix + "*)"
	return doc, nil
}

// ParseFirmware parses the devices entry ({"devices": [...]} and a
// newline) the way Parse parses meta_data.json: the same schema, the same
// handling of unknown device types.
func ParseFirmware(devices []byte, uuid string, rev int64) (*Document, error) {
	body, ok := strings.CutSuffix(string(devices), "\n")
	if !ok {
		return nil, fmt.Errorf("%w: firmware entry %s is truncated (%d bytes, no final newline)", ErrInvalid, wire.FirmwareDevices, len(devices))
	}
	doc, err := parse([]byte(body), wire.FirmwareDevices)
	if err != nil {
		return nil, err
	}
	doc.UUID, doc.Revision, doc.Source = uuid, rev, KindFirmware
	return doc, nil
}

// readFirmwareEntry reads by_name/<name>/raw and checks it against
// by_name/<name>/size: a short read is a truncated entry.
func readFirmwareEntry(dir, name string) ([]byte, error) {
	p := filepath.Join(dir, "by_name", filepath.FromSlash(path.Clean(name)))
	sizeRaw, err := os.ReadFile(filepath.Join(p, "size"))
	if err != nil {
		return nil, fmt.Errorf("entry %s: %w", name, err)
	}
	size, err := strconv.ParseInt(strings.TrimSpace(string(sizeRaw)), 10, 64)
	if err != nil || size < 0 {
		return nil, fmt.Errorf("entry %s: size %q is not a number", name, strings.TrimSpace(string(sizeRaw)))
	}
	if size > wire.MaxFirmwareEntry {
		return nil, fmt.Errorf("entry %s: %d bytes, more than %d", name, size, wire.MaxFirmwareEntry)
	}
	b, err := os.ReadFile(filepath.Join(p, "raw"))
	if err != nil {
		return nil, fmt.Errorf("entry %s: %w", name, err)
	}
	if int64(len(b)) != size {
		return nil, fmt.Errorf("entry %s is truncated: read %d of its %d bytes", name, len(b), size)
	}
	return b, nil
}
