// Package source reads the device metadata a guest is given: from QEMU's
// firmware configuration device (fw_cfg entries under
// /sys/firmware/qemu_fw_cfg, the module loaded when needed; no mount, no
// network), from a config drive (found by its label among the block
// devices and read without mounting it) or from the metadata service
// (169.254.169.254 and fe80::a9fe:a9fe, with retries and session tokens
// when the service requires them). It always reads the "latest" version,
// the only one that carries every device type (cloud-init reads
// 2018-08-27, which has no shares), and returns the devices list
// validated against the device-role-tagging schema. With several
// transports present, Auto returns the document of the newest metadata
// revision.
//
// Entries of types the agent does not know (a future "gpu") are dropped
// and reported, so that the rest still applies; anything else the schema
// refuses makes the whole document invalid: Parse returns an error and
// the caller changes nothing.
package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/internal/metadata/wire"
	"github.com/vmeta/vmeta/schema/check"
)

// MetaDataPath is the file read, relative to a config drive's root or the
// metadata service's root.
const MetaDataPath = "openstack/latest/meta_data.json"

// MaxDocument bounds meta_data.json (Nova's are a few KiB; user data is in
// another file).
const MaxDocument = 4 << 20

// Document is what the agent uses from one read of the metadata.
type Document struct {
	// Origin says where it came from: "config drive /dev/sr0",
	// "http://169.254.169.254", "firmware (fw_cfg)".
	Origin string
	// Source is the kind of transport: KindFirmware, KindDrive or
	// KindHTTP.
	Source string
	// Revision is the metadata revision the host published (vmeta's
	// vmeta_revision key; the firmware's revision entry); 0 when the
	// document carries none (a host before revisions, another cloud).
	Revision int64
	// Sources says what each transport Auto asked gave (nil from a single
	// source).
	Sources []SourceResult
	// UUID is the instance's uuid from meta_data.json ("" if absent).
	UUID string
	// Devices are the nic, disk and share entries, in document order.
	Devices []wire.Device
	// PCI are the pci entries (tagged passthrough devices and their guest
	// PCI addresses, schema 1.2), in document order. The agent validates
	// and keeps them but writes no udev rules for them: what a
	// passthrough device offers (a GPU's render nodes, an NVMe drive's
	// namespaces, a NIC's interfaces) is its driver's, and its guest
	// address, which the entry carries, is what identifies it.
	PCI []wire.Device
	// Ignored describes the entries that were dropped.
	Ignored []string
	// Digest identifies the devices list (SHA-256 of its JSON form) so
	// that a re-read that changes nothing is recognised.
	Digest string
}

// The kinds of transport, in the order Auto prefers them when they carry
// the same revision.
const (
	KindFirmware = "firmware"
	KindDrive    = "config drive"
	KindHTTP     = "metadata service"
)

// SourceResult is what one transport gave Auto: a document of some
// revision, or why not.
type SourceResult struct {
	Source   string `json:"source"`
	Origin   string `json:"origin,omitempty"`
	Revision int64  `json:"revision,omitempty"`
	// Used is true for the one whose document was returned.
	Used bool `json:"used,omitempty"`
	// Absent is true when the transport is not there at all (no drive,
	// no fw_cfg entries); Error then says so too.
	Absent bool   `json:"absent,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Source is where documents come from.
type Source interface {
	// Fetch reads and parses the current document.
	Fetch(ctx context.Context) (*Document, error)
	// String names the source for logs.
	String() string
}

// ErrInvalid is wrapped by errors for documents that are not usable
// metadata (not JSON, not an object, refused by the schema).
var ErrInvalid = errors.New("invalid metadata")

// known are the device types the agent acts on.
var known = map[string]bool{"nic": true, "disk": true, "share": true, "pci": true}

// Parse parses meta_data.json. It returns an error wrapping ErrInvalid
// (and a *check.Error when the schema refused it) for a document the
// agent must not act on.
func Parse(data []byte) (*Document, error) { return parse(data, "meta_data.json") }

// parse parses a JSON object with a devices list (and maybe uuid and
// vmeta_revision); what names it in errors.
func parse(data []byte, what string) (*Document, error) {
	if len(data) > MaxDocument {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalid, what, len(data), MaxDocument)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("%w: %s is not a JSON object: %w", ErrInvalid, what, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: %s has data after its JSON object", ErrInvalid, what)
	}
	doc := &Document{}
	if raw, ok := top["uuid"]; ok {
		_ = json.Unmarshal(raw, &doc.UUID)
	}
	if raw, ok := top[wire.RevisionKey]; ok {
		rev, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
		if err != nil || rev < 0 {
			return nil, fmt.Errorf("%w: %s: %s is not a revision (a non-negative integer)", ErrInvalid, wire.RevisionKey, raw)
		}
		doc.Revision = rev
	}
	var entries []json.RawMessage
	if raw, ok := top["devices"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if err := json.Unmarshal(raw, &entries); err != nil {
			return nil, fmt.Errorf("%w: devices: not a list: %w", ErrInvalid, err)
		}
	}
	kept := make([]json.RawMessage, 0, len(entries))
	orig := make([]int, 0, len(entries)) // kept index -> index in the document
	for i, e := range entries {
		var head struct {
			Type any `json:"type"`
		}
		if json.Unmarshal(e, &head) == nil {
			if t, ok := head.Type.(string); ok && !known[t] {
				doc.Ignored = append(doc.Ignored, fmt.Sprintf("/devices/%d: device type %q is not one the agent knows (nic, disk, share, pci); ignored", i, t))
				continue
			}
		}
		kept = append(kept, e)
		orig = append(orig, i)
	}
	devicesDoc, err := json.Marshal(struct {
		Devices []json.RawMessage `json:"devices"`
	}{kept})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := check.ValidateJSON(check.DevicesV12, devicesDoc); err != nil {
		var se *check.Error
		if errors.As(err, &se) && len(orig) < len(entries) {
			renumber(se, orig)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var devs struct {
		Devices []wire.Device `json:"devices"`
	}
	if err := json.Unmarshal(devicesDoc, &devs); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for _, d := range devs.Devices {
		if d.Type == "pci" {
			doc.PCI = append(doc.PCI, d)
		} else {
			doc.Devices = append(doc.Devices, d)
		}
	}
	sum := sha256.Sum256(devicesDoc)
	doc.Digest = hex.EncodeToString(sum[:])
	return doc, nil
}

// renumber rewrites the violations' pointers /devices/N... from the list
// that was validated (without the ignored entries) to the document's.
func renumber(se *check.Error, orig []int) {
	for i, v := range se.Violations {
		rest, ok := strings.CutPrefix(v.Pointer, "/devices/")
		if !ok {
			continue
		}
		num, tail, _ := strings.Cut(rest, "/")
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 || n >= len(orig) {
			continue
		}
		p := "/devices/" + strconv.Itoa(orig[n])
		if tail != "" {
			p += "/" + tail
		}
		se.Violations[i].Pointer = p
	}
}
