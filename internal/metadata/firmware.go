package metadata

// The firmware transport: the guest-facing facts hostctl also hands to
// QEMU's firmware configuration device (fw_cfg), which a Linux guest reads
// from /sys/firmware/qemu_fw_cfg/by_name/<name>/raw without a mount or a
// network, from the earliest stages of boot. The entries are cut from a
// rendered Tree — never a second rendering — and carry only what every
// guest of the instance may see anyway: the "latest" devices document, the
// instance uuid and the metadata revision. Never user data, injected files,
// keys or passwords.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/internal/metadata/wire"
	"github.com/vmeta/vmeta/schema"
)

// Firmware entry names. QEMU reserves "opt/" for names chosen outside
// QEMU and asks that they continue with a reverse domain name the chooser
// controls ("opt/<RFQDN>/..."); vmeta's is io.github.vmeta (its module
// lives at github.com/vmeta).
const (
	FirmwarePrefix   = wire.FirmwarePrefix
	FirmwareDevices  = wire.FirmwareDevices
	FirmwareUUID     = wire.FirmwareUUID
	FirmwareRevision = wire.FirmwareRevision
)

// MaxFirmwareName is the longest fw_cfg file name QEMU accepts: its
// directory entry holds 56 bytes including the terminating NUL
// (FW_CFG_MAX_FILE_PATH).
const MaxFirmwareName = 55

// MaxFirmwareEntry bounds one entry's content (the devices document of a
// large instance is a few KiB).
const MaxFirmwareEntry = wire.MaxFirmwareEntry

// FirmwareEntry is one fw_cfg file: its name and its content.
type FirmwareEntry struct {
	Name string
	Data []byte
}

// CheckFirmwareName checks a fw_cfg file name: "opt/", then a reverse
// domain name with at least one dot, then "/" and a file name; printable
// ASCII without spaces or empty, "." or ".." components; at most
// MaxFirmwareName bytes. The error names the value and the rule broken.
func CheckFirmwareName(name string) error {
	bad := func(rule string) error {
		return fmt.Errorf("firmware entry name %q: %s", name, rule)
	}
	if len(name) > MaxFirmwareName {
		return bad(fmt.Sprintf("is %d bytes, more than QEMU's limit of %d", len(name), MaxFirmwareName))
	}
	rest, ok := strings.CutPrefix(name, "opt/")
	if !ok {
		return bad(`must start with "opt/" (QEMU reserves every other name)`)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' {
			return bad(fmt.Sprintf("byte %d (0x%02x) is not printable ASCII", i, c))
		}
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 {
		return bad(`must be "opt/<reverse-domain>/<name>"`)
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return bad(`has an empty, "." or ".." component`)
		}
	}
	if !strings.Contains(parts[0], ".") {
		return bad(fmt.Sprintf("%q is not a reverse domain name (QEMU asks for opt/<RFQDN>/...)", parts[0]))
	}
	return nil
}

// FirmwareEntries cuts the firmware entries from a rendered tree: the
// devices list of openstack/latest/meta_data.json as the
// device-role-tagging document ({"devices": [...]}, checked against the
// schema again), the instance uuid and the metadata revision
// (RevisionKey), each a text file ending in a newline, so that a truncated
// entry is never mistaken for a shorter valid one. The tree must carry a
// revision (Options.Revision).
func FirmwareEntries(t *Tree) ([]FirmwareEntry, error) {
	const src = "openstack/latest/meta_data.json"
	md, ok := t.Get(src)
	if !ok {
		return nil, fmt.Errorf("firmware entries: the tree has no %s", src)
	}
	var top struct {
		UUID     string          `json:"uuid"`
		Devices  json.RawMessage `json:"devices"`
		Revision int64           `json:"vmeta_revision"`
	}
	if err := json.Unmarshal(md, &top); err != nil {
		return nil, fmt.Errorf("firmware entries: %s: %w", src, err)
	}
	if top.UUID == "" {
		return nil, fmt.Errorf("firmware entries: %s has no uuid", src)
	}
	if top.Revision <= 0 {
		return nil, fmt.Errorf("firmware entries: %s has no %s (the tree was rendered without a revision)", src, RevisionKey)
	}
	devs := top.Devices
	if len(bytes.TrimSpace(devs)) == 0 || bytes.Equal(bytes.TrimSpace(devs), []byte("null")) {
		devs = json.RawMessage("[]")
	}
	var doc bytes.Buffer
	doc.WriteString(`{"devices":`)
	doc.Write(devs)
	doc.WriteString("}\n")
	if err := schema.ValidateJSON(schema.DevicesV12, doc.Bytes()); err != nil {
		return nil, fmt.Errorf("firmware entries: devices of %s: %w", src, err)
	}
	out := []FirmwareEntry{
		{Name: FirmwareDevices, Data: doc.Bytes()},
		{Name: FirmwareUUID, Data: []byte(top.UUID + "\n")},
		{Name: FirmwareRevision, Data: []byte(strconv.FormatInt(top.Revision, 10) + "\n")},
	}
	for _, e := range out {
		if err := CheckFirmwareName(e.Name); err != nil {
			return nil, err
		}
		if len(e.Data) > MaxFirmwareEntry {
			return nil, fmt.Errorf("firmware entry %s: %d bytes, more than %d", e.Name, len(e.Data), MaxFirmwareEntry)
		}
	}
	return out, nil
}

// ParseFirmwareLine parses the content of a one-line entry (the uuid, the
// revision): text ending in exactly one newline; see wire.ParseFirmwareLine.
func ParseFirmwareLine(name string, b []byte) (string, error) { return wire.ParseFirmwareLine(name, b) }

// ParseFirmwareRevision parses the revision entry: a positive decimal
// number and a newline; see wire.ParseFirmwareRevision.
func ParseFirmwareRevision(b []byte) (int64, error) { return wire.ParseFirmwareRevision(b) }

// TreeRevision is the metadata revision a rendered tree carries
// (RevisionKey of openstack/latest/meta_data.json); 0 when none.
func TreeRevision(t *Tree) int64 {
	md, ok := t.Get("openstack/latest/meta_data.json")
	if !ok {
		return 0
	}
	var top struct {
		Revision int64 `json:"vmeta_revision"`
	}
	if json.Unmarshal(md, &top) != nil {
		return 0
	}
	return top.Revision
}
