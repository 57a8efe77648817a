// Package wire holds the parts of the guest-visible metadata format that
// a reader needs without the renderer: the entry of the devices list, the
// revision key of meta_data.json, the firmware (fw_cfg) entry names and
// their parsers. Package metadata, which renders them, aliases every one;
// the guest agent imports this package alone, so that it does not link
// the renderer, the instance model and the JSON Schema library behind
// them.
package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// RevisionKey is the key of openstack/latest/meta_data.json that carries
// the metadata revision (Options.Revision): a vmeta addition, ignored by
// cloud-init, absent from the dated versions.
const RevisionKey = "vmeta_revision"

// Device is one entry of the devices list (the device-role-tagging
// document). Field order follows the specification's examples.
type Device struct {
	Type      string   `json:"type"`
	Bus       string   `json:"bus"`
	Address   string   `json:"address"`
	MAC       string   `json:"mac,omitempty"`
	Serial    string   `json:"serial,omitempty"`
	Path      string   `json:"path,omitempty"`
	Tags      []string `json:"tags,omitempty"`
	VLAN      *int     `json:"vlan,omitempty"`
	VFTrusted *bool    `json:"vf_trusted,omitempty"`
	Encrypted *bool    `json:"encrypted,omitempty"`
	ShareID   string   `json:"share_id,omitempty"`
	Tag       string   `json:"tag,omitempty"`
}

// Firmware entry names. QEMU reserves "opt/" for names chosen outside
// QEMU and asks that they continue with a reverse domain name the chooser
// controls ("opt/<RFQDN>/..."); vmeta's is io.github.vmeta (its module
// lives at github.com/vmeta).
const (
	FirmwarePrefix   = "opt/io.github.vmeta/"
	FirmwareDevices  = FirmwarePrefix + "devices"
	FirmwareUUID     = FirmwarePrefix + "uuid"
	FirmwareRevision = FirmwarePrefix + "revision"
)

// MaxFirmwareEntry bounds one entry's content (the devices document of a
// large instance is a few KiB).
const MaxFirmwareEntry = 1 << 20

// ParseFirmwareLine parses the content of a one-line entry (the uuid, the
// revision): text ending in exactly one newline. A missing newline means
// the entry was cut short.
func ParseFirmwareLine(name string, b []byte) (string, error) {
	s, ok := strings.CutSuffix(string(b), "\n")
	switch {
	case len(b) == 0:
		return "", fmt.Errorf("firmware entry %s is empty", name)
	case !ok:
		return "", fmt.Errorf("firmware entry %s is truncated (%d bytes, no final newline)", name, len(b))
	case strings.ContainsAny(s, "\n\x00"):
		return "", fmt.Errorf("firmware entry %s: more than one line", name)
	}
	return s, nil
}

// ParseFirmwareRevision parses the revision entry: a positive decimal
// number and a newline.
func ParseFirmwareRevision(b []byte) (int64, error) {
	s, err := ParseFirmwareLine(FirmwareRevision, b)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("firmware entry %s: %q is not a positive decimal revision", FirmwareRevision, s)
	}
	return n, nil
}
