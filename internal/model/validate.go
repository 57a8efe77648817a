package model

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/uuid"
	"github.com/vmeta/vmeta/schema"
)

// FieldError says what is wrong with one field of a spec: where, what value,
// and which rule it breaks.
type FieldError struct {
	// Field is a path into the spec, e.g. "disks[1].tag".
	Field string
	// Value is the offending value, as written (may be nil when missing).
	Value any
	// Rule is the rule that was broken, in words.
	Rule string
}

// FieldErrors is e alone; *SpecError has the same method, so code that
// collects field errors asks for the method rather than the types.
func (e FieldError) FieldErrors() []FieldError { return []FieldError{e} }

// FieldErrors are the spec's invalid fields.
func (e *SpecError) FieldErrors() []FieldError { return e.Errors }

func (e FieldError) Error() string {
	if e.Value == nil {
		return fmt.Sprintf("%s: %s", e.Field, e.Rule)
	}
	return fmt.Sprintf("%s: %s: %s", e.Field, formatValue(e.Value), e.Rule)
}

// formatValue renders an offending value for an error message, cut to a
// readable length (schema.QuoteValue) when it is long.
func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return schema.QuoteValue(v)
	default:
		s := fmt.Sprint(v)
		if utf8.RuneCountInString(s) > schema.MaxQuoted {
			return schema.QuoteValue(s) // quoted, to show where the cut is
		}
		return s
	}
}

// SpecError lists every problem found in a spec, or in the fields of
// another request (Of says which).
type SpecError struct {
	Errors []FieldError
	// Of is what the fields belong to, as the message names it ("invalid
	// flavor: …"): "flavor", "image", "share"…; empty for an instance spec.
	Of string
}

func (e *SpecError) Error() string {
	return "invalid " + e.Subject() + ": " + JoinFieldErrors(e.Errors) // specerror.go
}

// ErrInvalidSpec is matched by errors.Is for every *SpecError.
var ErrInvalidSpec = errkind.New(errkind.Invalid, "invalid instance spec")

// Is makes errors.Is(err, ErrInvalidSpec) (and errkind.Invalid) true for spec errors.
func (e *SpecError) Is(target error) bool { return errors.Is(ErrInvalidSpec, target) }

type collector struct{ errs []FieldError }

func (c *collector) add(field string, value any, rule string, args ...any) {
	c.errs = append(c.errs, FieldError{Field: field, Value: value, Rule: fmt.Sprintf(rule, args...)})
}

func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return &SpecError{Errors: c.errs}
}

// Tag rules.
//
// vmeta follows Nova's boot-time rule for disk and NIC tags (the
// block_device_mapping and networks "tag" schema of the compute API:
// pattern ^[^,/]*$, at most 60 characters, MAX_TAG_LENGTH), so a spec that
// Nova accepts is accepted here and vice versa, and adds one restriction:
// no control characters, because tags end up in udev rules files, in
// symlink names and in log lines, where a newline or NUL would corrupt the
// file or forge a line. Other characters that udev does not allow in
// symlinks (spaces, '*', ...) stay legal, as in Nova; the guest agent
// escapes them consistently.
//
// Share tags follow Nova's share API schema (^[a-zA-Z0-9-]*$), but at most
// 36 bytes, where Nova's schema says 255 and its specification 64: the tag
// is the virtiofs mount tag, and QEMU's vhost-user-fs device refuses tags
// longer than the 36-byte tag field of the virtio-fs configuration space.
// It is vmeta's one limit for share tags, at every input (the instance
// spec, the admin API's attach, the CLI) and in what vmeta publishes. A
// share's UUID (the default tag) is exactly 36 characters.
const (
	MaxTagLength      = 60
	MaxShareTagLength = 36
)

var shareTagRE = regexp.MustCompile(`^[a-zA-Z0-9-]+$`)

// ValidateTag checks a disk or NIC tag against the tag rule.
func ValidateTag(tag string) error {
	switch {
	case tag == "":
		return errors.New("must not be empty")
	case !utf8.ValidString(tag):
		return errors.New("must be valid UTF-8")
	case utf8.RuneCountInString(tag) > MaxTagLength:
		return fmt.Errorf("must be at most %d characters (Nova's tag limit)", MaxTagLength)
	case strings.ContainsAny(tag, ",/"):
		return errors.New("must not contain ',' or '/' (Nova's tag rule)")
	}
	return checkText(tag) // control and bidirectional characters (bounds.go)
}

// ValidateShareTag checks a virtiofs share tag against the one share tag
// rule (MaxShareTagLength); its errors say why.
func ValidateShareTag(tag string) error {
	switch {
	case tag == "":
		return errors.New("must not be empty")
	case len(tag) > MaxShareTagLength:
		return fmt.Errorf("is %d bytes: a share tag is at most %d bytes, the size of the tag field of QEMU's virtio-fs device (the specification's 64 and Nova's 255 do not fit it)", len(tag), MaxShareTagLength)
	case !shareTagRE.MatchString(tag):
		return errors.New("must contain only ASCII letters, digits and '-' (Nova's share tag rule)")
	}
	return nil
}

// ValidateShareSource checks the host directory of a share as far as it
// can be checked without the host: an absolute path with no '..'
// element. Where it must be (inside the share root) is the share
// service's check; a spec does not set it (hostctl fills it in from the
// share registry).
func ValidateShareSource(source string) error {
	if source == "" {
		return nil
	}
	if !strings.HasPrefix(source, "/") {
		return errors.New("must be an absolute host directory: a share's directory comes from the share registry (hostctl share create); name the share by share_id and leave source out")
	}
	for _, el := range strings.Split(source, "/") {
		if el == ".." {
			return errors.New("must not contain '..': a share's directory comes from the share registry (hostctl share create); name the share by share_id and leave source out")
		}
	}
	for _, r := range source {
		if r < 0x20 || r == 0x7f {
			return errors.New("must not contain control characters")
		}
	}
	return nil
}

// Address forms per bus (nova/objects/fields.py), anchored.
var (
	scsiAddrRE = regexp.MustCompile(`^[0-9a-f]+:[0-9a-f]+:[0-9a-f]+:[0-9a-f]+$`)
	ideAddrRE  = regexp.MustCompile(`^[0-1]:[0-1]$`)
	usbAddrRE  = regexp.MustCompile(`^[0-9a-f]+:[0-9a-f]+$`)
)

// MetadataBus maps a disk's target bus to the bus named in device metadata,
// as Nova's libvirt driver does: virtio-blk disks are PCI functions. SATA
// disks sit behind an AHCI controller that Linux presents as a SCSI host,
// and libvirt gives them a drive address (controller:bus:target:unit), so
// vmeta reports them on the scsi bus where Nova would drop them.
func MetadataBus(diskBus string) string {
	switch diskBus {
	case DiskBusVirtio, "":
		return "pci"
	case DiskBusSATA:
		return "scsi"
	default:
		return diskBus
	}
}

// checkAddress reports whether addr has the form the metadata bus requires.
// "none" (Nova's placeholder for an unknown address) and "" are always
// accepted.
func checkAddress(bus, addr string) error {
	if addr == "" || addr == "none" {
		return nil
	}
	var re *regexp.Regexp
	var form string
	switch bus {
	case "pci":
		if !IsPCIAddress(addr) {
			return errors.New("must be a PCI address dddd:bb:ss.f (lower-case hex) for bus pci")
		}
		return nil
	case "scsi":
		re, form = scsiAddrRE, "a SCSI address controller:bus:target:unit (hex)"
	case "ide":
		re, form = ideAddrRE, "an IDE address bus:unit, each 0 or 1"
	case "usb":
		re, form = usbAddrRE, "a USB address bus:port (hex)"
	case "none":
		return errors.New(`must be empty or "none" on bus none`)
	default:
		return fmt.Errorf("bus %q takes no address", bus)
	}
	if !re.MatchString(addr) {
		return fmt.Errorf("must be %s for bus %s", form, bus)
	}
	return nil
}

// Normalize fills defaults (bus virtio/pci, hostname from name, share tag
// from share id) and canonicalises case-insensitive values (UUIDs, MACs,
// addresses), so that stored specs compare and index consistently.
func (in *Instance) Normalize() {
	in.UUID = strings.ToLower(in.UUID)
	if in.Hostname == "" {
		in.Hostname = in.Name
	}
	for i := range in.Addresses {
		if a, err := netip.ParseAddr(in.Addresses[i]); err == nil {
			in.Addresses[i] = a.Unmap().String()
		}
	}
	for i := range in.Disks {
		d := &in.Disks[i]
		if d.Bus == "" {
			d.Bus = DiskBusVirtio
		}
		d.Address = strings.ToLower(d.Address)
	}
	for i := range in.NICs {
		n := &in.NICs[i]
		n.MAC = strings.ToLower(n.MAC)
		if n.Bus == "" {
			n.Bus = "pci"
		}
		n.Address = strings.ToLower(n.Address)
	}
	for i := range in.Shares {
		s := &in.Shares[i]
		s.ShareID = strings.ToLower(s.ShareID)
		if s.Tag == "" {
			s.Tag = s.ShareID
		}
	}
	for i := range in.PCIAliases {
		if in.PCIAliases[i].Count == 0 {
			in.PCIAliases[i].Count = 1
		}
	}
	for i := range in.PCIDevices {
		in.PCIDevices[i].Address = strings.ToLower(in.PCIDevices[i].Address)
	}
}

// Validate checks the rules a JSON Schema cannot express. It expects a
// normalized instance and reports every problem, not just the first.
func (in *Instance) Validate() error {
	var c collector
	if in.Name == "" {
		c.add("name", nil, "is required")
	}
	if in.UUID != "" && !uuid.Valid(in.UUID) {
		c.add("uuid", in.UUID, "must be a UUID (8-4-4-4-12 hex digits)")
	}
	seenAddr := map[netip.Addr]int{}
	for i, a := range in.Addresses {
		f := fmt.Sprintf("addresses[%d]", i)
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			c.add(f, a, "must be an IPv4 or IPv6 address without zone")
			continue
		}
		if ip.IsUnspecified() || ip.IsMulticast() {
			c.add(f, a, "must be a unicast address")
		}
		if j, dup := seenAddr[ip]; dup {
			c.add(f, a, "duplicates addresses[%d]", j)
		}
		seenAddr[ip] = i
	}
	uniq := func(field, kind, v string, seen map[string]int, i int) {
		if v == "" {
			return
		}
		if j, dup := seen[v]; dup {
			c.add(field, v, "%s must be unique per instance; %s[%d] has it too", kind, strings.SplitN(field, "[", 2)[0], j)
			return
		}
		seen[v] = i
	}

	// The PCI slots of the guest are shared by disks and NICs.
	pciSlots := map[string]string{}
	claimPCI := func(field, addr string) {
		if addr == "" || addr == "none" {
			return
		}
		if other, dup := pciSlots[addr]; dup {
			c.add(field, addr, "PCI address is already used by %s", other)
			return
		}
		pciSlots[addr] = field
	}

	names, diskTags, serials := map[string]int{}, map[string]int{}, map[string]int{}
	for i, d := range in.Disks {
		f := fmt.Sprintf("disks[%d]", i)
		uniq(f+".name", "disk name", d.Name, names, i)
		switch d.Bus {
		case DiskBusVirtio, DiskBusSCSI, DiskBusSATA, DiskBusIDE, DiskBusUSB:
		default:
			c.add(f+".bus", d.Bus, "must be one of virtio, scsi, sata, ide, usb")
			continue
		}
		if err := checkAddress(MetadataBus(d.Bus), d.Address); err != nil {
			c.add(f+".address", d.Address, "%v", err)
		} else if d.Bus == DiskBusVirtio {
			claimPCI(f+".address", d.Address)
		}
		if d.Tag != "" {
			if err := ValidateTag(d.Tag); err != nil {
				c.add(f+".tag", d.Tag, "%v", err)
			} else {
				uniq(f+".tag", "disk tag", d.Tag, diskTags, i)
			}
		}
		uniq(f+".serial", "disk serial", d.Serial, serials, i)
	}

	macs, nicTags := map[string]int{}, map[string]int{}
	for i, n := range in.NICs {
		f := fmt.Sprintf("nics[%d]", i)
		if !IsMAC(n.MAC) {
			c.add(f+".mac", n.MAC, "must be a MAC address of six colon-separated hex octets")
		} else {
			uniq(f+".mac", "MAC address", n.MAC, macs, i)
		}
		switch n.Bus {
		case "pci", "none":
		default:
			c.add(f+".bus", n.Bus, "must be pci or none")
			continue
		}
		if err := checkAddress(n.Bus, n.Address); err != nil {
			c.add(f+".address", n.Address, "%v", err)
		} else if n.Bus == "pci" {
			claimPCI(f+".address", n.Address)
		}
		if n.Tag != "" {
			if err := ValidateTag(n.Tag); err != nil {
				c.add(f+".tag", n.Tag, "%v", err)
			} else {
				uniq(f+".tag", "NIC tag", n.Tag, nicTags, i)
			}
		}
		if n.VLAN != nil && (*n.VLAN < 0 || *n.VLAN > 4095) {
			c.add(f+".vlan", *n.VLAN, "must be between 0 and 4095")
		}
		for j, ipc := range n.IPs {
			validateIP(&c, fmt.Sprintf("%s.ips[%d]", f, j), ipc)
		}
	}

	shareIDs, shareTags := map[string]int{}, map[string]int{}
	for i, s := range in.Shares {
		f := fmt.Sprintf("shares[%d]", i)
		if !uuid.Valid(s.ShareID) {
			c.add(f+".share_id", s.ShareID, "must be a UUID")
		} else {
			uniq(f+".share_id", "share id", s.ShareID, shareIDs, i)
		}
		if err := ValidateShareTag(s.Tag); err != nil {
			c.add(f+".tag", s.Tag, "%v", err)
		} else {
			uniq(f+".tag", "share tag", s.Tag, shareTags, i)
		}
		if err := ValidateShareSource(s.Source); err != nil {
			c.add(f+".source", s.Source, "%v", err)
		}
	}

	pcis := map[string]int{}
	// pciTags holds the tags of pci_devices and pci_aliases: one device
	// type in the device metadata. Entries hostctl added for pci_aliases
	// (Alias set) carry their request's tag and are not counted twice.
	pciTags := map[string]string{}
	pciTag := func(field, tag string) {
		if tag == "" {
			return
		}
		if err := ValidateTag(tag); err != nil {
			c.add(field, tag, "%v", err)
			return
		}
		if other, dup := pciTags[tag]; dup {
			c.add(field, tag, "PCI device tag must be unique per instance; %s has it too", other)
			return
		}
		pciTags[tag] = field
	}
	for i, p := range in.PCIDevices {
		f := fmt.Sprintf("pci_devices[%d].address", i)
		if !IsPCIAddress(p.Address) {
			c.add(f, p.Address, "must be a PCI address dddd:bb:ss.f")
		} else {
			uniq(f, "PCI device", p.Address, pcis, i)
		}
		if err := checkAddress("pci", p.GuestAddress); err != nil {
			c.add(fmt.Sprintf("pci_devices[%d].guest_address", i), p.GuestAddress, "%v", err)
		} else {
			claimPCI(fmt.Sprintf("pci_devices[%d].guest_address", i), p.GuestAddress)
		}
		if p.Alias == "" {
			pciTag(fmt.Sprintf("pci_devices[%d].tag", i), p.Tag)
		}
	}

	aliases := map[string]int{}
	for i, a := range in.PCIAliases {
		f := fmt.Sprintf("pci_aliases[%d]", i)
		if !pciAliasRe.MatchString(a.Name) {
			c.add(f+".name", a.Name, "must be 1 to 64 of a-z, 0-9, _ and -, starting with a letter or digit")
		} else {
			uniq(f+".name", "PCI alias", a.Name, aliases, i)
		}
		if a.Count < 1 || a.Count > MaxPCIAliasCount {
			c.add(f+".count", a.Count, "must be 1 to %d", MaxPCIAliasCount)
		} else if a.Tag != "" && a.Count != 1 {
			c.add(f+".count", a.Count, "must be 1 with a tag (a tag names one device in the guest's metadata)")
		}
		pciTag(f+".tag", a.Tag)
	}

	keyNames := map[string]int{}
	for i, k := range in.PublicKeys {
		uniq(fmt.Sprintf("public_keys[%d].name", i), "key name", k.Name, keyNames, i)
	}
	paths := map[string]int{}
	for i, fl := range in.Files {
		uniq(fmt.Sprintf("files[%d].path", i), "file path", fl.Path, paths, i)
	}
	cpus := map[string]int{}
	for i, cpu := range in.DedicatedCPUs {
		uniq(fmt.Sprintf("dedicated_cpus[%d]", i), "CPU id", strconv.Itoa(cpu), cpus, i)
	}
	in.validateInputs(&c) // bounds.go
	return c.err()
}

// MaxPCIAliasCount is the most devices one pci_aliases entry requests.
const MaxPCIAliasCount = 64

var pciAliasRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

func validateIP(c *collector, f string, ipc IPConfig) {
	p, err := netip.ParsePrefix(ipc.Address)
	if err != nil {
		c.add(f+".address", ipc.Address, "must be an address with prefix length, e.g. 10.0.0.5/24")
		return
	}
	if ipc.Gateway != "" {
		gw, err := netip.ParseAddr(ipc.Gateway)
		switch {
		case err != nil:
			c.add(f+".gateway", ipc.Gateway, "must be an IP address")
		case gw.Is4() != p.Addr().Is4():
			c.add(f+".gateway", ipc.Gateway, "must be of the same family as %s", ipc.Address)
		case !p.Masked().Contains(gw) && !gw.IsLinkLocalUnicast():
			c.add(f+".gateway", ipc.Gateway, "must be inside %s", p.Masked())
		}
	}
	for k, d := range ipc.DNS {
		if _, err := netip.ParseAddr(d); err != nil {
			c.add(fmt.Sprintf("%s.dns[%d]", f, k), d, "must be an IP address")
		}
	}
}
