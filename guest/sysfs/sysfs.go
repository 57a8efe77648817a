// Package sysfs reads what a Linux guest knows about its disks, network
// interfaces and virtiofs devices from sysfs, under a root that tests point
// at a fixture tree: for each device its kernel name, device node, the
// sysfs path (DEVPATH), the PCI functions on that path, the SCSI address,
// the ATA port, the serial and the MAC.
//
// Where things are (Linux 6.1 and 6.12 guests of QEMU, observed):
//
//	virtio-blk  /sys/devices/pci0000:00/0000:00:07.0/virtio2/block/vda
//	            serial in /sys/block/vda/serial (at most 20 bytes)
//	virtio-scsi /sys/devices/pci0000:00/0000:00:05.0/virtio1/host0/target0:0:2/0:0:2:0/block/sda
//	            serial in /sys/block/sda/device/vpd_pg80 (4-byte header)
//	AHCI (SATA) /sys/devices/pci0000:00/0000:00:1f.2/ata3/host2/target2:0:0/2:0:0:0/block/sr0
//	            port in /sys/class/ata_port/ata3/port_no (1-based)
//	root port   /sys/devices/pci0000:00/0000:00:02.1/0000:02:00.0/virtio3/block/vdb
//	NIC         /sys/devices/pci0000:00/0000:00:03.0/virtio0/net/eth0, MAC in address
//	virtiofs    /sys/fs/virtiofs/<N>/tag (Linux 6.9 and later); the virtio
//	            device id 0x001a in /sys/bus/virtio/devices/virtio*/device
//
// Scan reads only small attribute files and follows the class symlinks; it
// never opens a device node.
package sysfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DefaultRoot is where sysfs is mounted.
const DefaultRoot = "/sys"

// Transport says how a disk is attached, as far as the guest can tell
// from its sysfs path.
type Transport string

// Transports.
const (
	TransportVirtio Transport = "virtio" // virtio-blk
	TransportSCSI   Transport = "scsi"   // a SCSI HBA (virtio-scsi, LSI, ...)
	TransportATA    Transport = "ata"    // libata (AHCI, PIIX): a SCSI host per port
	TransportNVMe   Transport = "nvme"
	TransportOther  Transport = "other"
)

// Disk is a whole block device (DEVTYPE=disk).
type Disk struct {
	// Name is the kernel name (vda, sdb, sr0).
	Name string
	// DevNode is the device node, /dev/<DEVNAME>.
	DevNode string
	// DevPath is the sysfs path without the mount point, as udev's
	// DEVPATH: /devices/pci0000:00/0000:00:07.0/virtio2/block/vda.
	DevPath string
	// Major and Minor are the device numbers ("" if unknown).
	Major, Minor string
	// Transport is how the disk is attached.
	Transport Transport
	// PCI lists the PCI functions on the path, outermost first; the last
	// is the function the disk (or its HBA) is.
	PCI []string
	// HCTL is the SCSI address host:channel:target:lun of SCSI and ATA
	// disks, nil for others.
	HCTL *HCTL
	// ATAPort is the port number within its ATA controller (0-based, the
	// AHCI port) for ATA disks, -1 otherwise.
	ATAPort int
	// Serial is the serial the device reports (virtio-blk serial, SCSI
	// and ATA VPD page 0x80, NVMe serial), trimmed; "" when none.
	Serial string
	// Sectors is the size in 512-byte sectors.
	Sectors int64
	// Virtual is true for devices not backed by hardware (loop, ram, dm,
	// zram): they are never matched against device metadata.
	Virtual bool
	// Partitions are the disk's partitions, by number.
	Partitions []Partition
}

// PCIFunction is the PCI function the disk or its HBA is ("" if none).
func (d *Disk) PCIFunction() string {
	if len(d.PCI) == 0 {
		return ""
	}
	return d.PCI[len(d.PCI)-1]
}

// Partition is a partition of a Disk.
type Partition struct {
	Name         string
	DevNode      string
	DevPath      string
	Major, Minor string
	Number       int
}

// HCTL is a Linux SCSI address.
type HCTL struct {
	Host, Channel, Target, LUN uint64
}

func (h HCTL) String() string {
	return fmt.Sprintf("%d:%d:%d:%d", h.Host, h.Channel, h.Target, h.LUN)
}

// NIC is a network interface backed by a device (virtual interfaces such
// as lo, bridges and bonds are skipped).
type NIC struct {
	// Name is the current interface name.
	Name string
	// Index is the interface index.
	Index int
	// MAC is the current hardware address, lower case.
	MAC string
	// DevPath is the sysfs path without the mount point.
	DevPath string
	// PCI lists the PCI functions on the path, outermost first.
	PCI []string
}

// PCIFunction is the PCI function the NIC is ("" if none).
func (n *NIC) PCIFunction() string {
	if len(n.PCI) == 0 {
		return ""
	}
	return n.PCI[len(n.PCI)-1]
}

// VirtioFS is what the guest sees of virtiofs devices.
type VirtioFS struct {
	// TagsKnown is true when the kernel lists the tags
	// (/sys/fs/virtiofs, Linux 6.9 and later); Tags is then the set of
	// tags offered by the host.
	TagsKnown bool
	Tags      map[string]bool
	// Devices counts virtio devices of the virtiofs type (0x001a), known
	// on every kernel.
	Devices int
}

// Inventory is everything Scan found.
type Inventory struct {
	Disks    []Disk
	NICs     []NIC
	VirtioFS VirtioFS
}

// Disk returns the disk with kernel name name.
func (inv *Inventory) Disk(name string) *Disk {
	for i := range inv.Disks {
		if inv.Disks[i].Name == name {
			return &inv.Disks[i]
		}
	}
	return nil
}

// Scanner reads sysfs under Root and names device nodes under DevRoot.
type Scanner struct {
	// Root is where sysfs is mounted; DefaultRoot when empty.
	Root string
	// DevRoot is where device nodes live; "/dev" when empty.
	DevRoot string
}

// digits reports whether s is a non-empty string of ASCII digits (the
// regular expression \d+; no regular expressions are compiled at the
// agent's start).
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// hctlParts returns the four numbers of a SCSI address host:channel:
// target:lun (`^(\d+):(\d+):(\d+):(\d+)$`), or nil.
func hctlParts(s string) []string {
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return nil
	}
	for _, p := range parts {
		if !digits(p) {
			return nil
		}
	}
	return parts
}

// isATA reports whether s names an ATA link (`^ata(\d+)$`).
func isATA(s string) bool {
	rest, ok := strings.CutPrefix(s, "ata")
	return ok && digits(rest)
}

// isVirtio reports whether s names a virtio device (`^virtio\d+$`).
func isVirtio(s string) bool {
	rest, ok := strings.CutPrefix(s, "virtio")
	return ok && digits(rest)
}

// virtioFSDeviceID is the virtio device id of virtiofs (VIRTIO_ID_FS).
const virtioFSDeviceID = 0x1a

// Scan reads the inventory. A device whose attributes cannot be read is
// skipped; only an unreadable sysfs is an error.
func (s Scanner) Scan() (*Inventory, error) {
	root := s.Root
	if root == "" {
		root = DefaultRoot
	}
	devRoot := s.DevRoot
	if devRoot == "" {
		devRoot = "/dev"
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	inv := &Inventory{}
	disks, err := scanBlock(root, devRoot)
	if err != nil {
		return nil, err
	}
	inv.Disks = disks
	if inv.NICs, err = scanNet(root); err != nil {
		return nil, err
	}
	inv.VirtioFS = scanVirtioFS(root)
	return inv, nil
}

func scanBlock(root, devRoot string) ([]Disk, error) {
	classDir := filepath.Join(root, "class", "block")
	ents, err := os.ReadDir(classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	var disks []Disk
	parts := map[string][]Partition{} // disk devpath -> partitions
	for _, e := range ents {
		real, err := filepath.EvalSymlinks(filepath.Join(classDir, e.Name()))
		if err != nil {
			continue // removed while we looked
		}
		devPath, ok := relDevPath(root, real)
		if !ok {
			continue
		}
		ue := readUevent(filepath.Join(real, "uevent"))
		name := e.Name()
		devNode := filepath.Join(devRoot, name)
		if dn := ue["DEVNAME"]; dn != "" {
			devNode = filepath.Join(devRoot, dn)
		}
		if ue["DEVTYPE"] == "partition" || exists(filepath.Join(real, "partition")) {
			n, _ := strconv.Atoi(readAttr(filepath.Join(real, "partition")))
			if n == 0 {
				n, _ = strconv.Atoi(ue["PARTN"])
			}
			parent := filepath.Dir(devPath)
			parts[parent] = append(parts[parent], Partition{Name: name, DevNode: devNode, DevPath: devPath, Major: ue["MAJOR"], Minor: ue["MINOR"], Number: n})
			continue
		}
		d := Disk{Name: name, DevNode: devNode, DevPath: devPath, Major: ue["MAJOR"], Minor: ue["MINOR"], ATAPort: -1}
		d.Virtual = strings.HasPrefix(devPath, "/devices/virtual/")
		d.Sectors, _ = strconv.ParseInt(readAttr(filepath.Join(real, "size")), 10, 64)
		describeDisk(root, real, devPath, &d)
		disks = append(disks, d)
	}
	for i := range disks {
		p := parts[disks[i].DevPath]
		sort.Slice(p, func(a, b int) bool { return p[a].Number < p[b].Number })
		disks[i].Partitions = p
	}
	sort.Slice(disks, func(a, b int) bool { return disks[a].Name < disks[b].Name })
	return disks, nil
}

// describeDisk works out transport, PCI path, SCSI address, ATA port and
// serial from the disk's sysfs path and attributes.
func describeDisk(root, real, devPath string, d *Disk) {
	comps := strings.Split(devPath, "/")
	ataLink := ""
	for i, c := range comps {
		switch {
		case isPCIAddress(c):
			d.PCI = append(d.PCI, c)
		case isATA(c):
			ataLink = c
		case hctlParts(c) != nil && i+2 < len(comps) && comps[i+1] == "block":
			m := hctlParts(c)
			h := HCTL{}
			h.Host, _ = strconv.ParseUint(m[0], 10, 64)
			h.Channel, _ = strconv.ParseUint(m[1], 10, 64)
			h.Target, _ = strconv.ParseUint(m[2], 10, 64)
			h.LUN, _ = strconv.ParseUint(m[3], 10, 64)
			d.HCTL = &h
		}
	}
	blockParent := ""
	if len(comps) >= 3 && comps[len(comps)-2] == "block" {
		blockParent = comps[len(comps)-3]
	}
	switch {
	case d.HCTL != nil && ataLink != "":
		d.Transport = TransportATA
		// port_no is libata's 1-based port number within the host
		// (local_port_no): AHCI port 0 is 1.
		if n, err := strconv.Atoi(readAttr(filepath.Join(root, "class", "ata_port", ataLink, "port_no"))); err == nil && n > 0 {
			d.ATAPort = n - 1
		}
	case d.HCTL != nil:
		d.Transport = TransportSCSI
	case isVirtio(blockParent):
		d.Transport = TransportVirtio
	case strings.HasPrefix(blockParent, "nvme"):
		d.Transport = TransportNVMe
	default:
		d.Transport = TransportOther
	}
	switch d.Transport {
	case TransportVirtio:
		d.Serial = cleanSerial(readRaw(filepath.Join(real, "serial")))
	case TransportSCSI, TransportATA:
		d.Serial = ParseVPD80(readRaw(filepath.Join(real, "device", "vpd_pg80")))
	case TransportNVMe:
		d.Serial = cleanSerial(readRaw(filepath.Join(real, "device", "serial")))
	}
}

// ParseVPD80 returns the unit serial number of a SCSI VPD page 0x80 as
// the kernel exposes it in vpd_pg80: a 4-byte header (peripheral, page
// code 0x80, 16-bit big-endian length) followed by the serial, which
// devices pad with spaces or NULs. Anything that is not such a page
// yields "".
func ParseVPD80(b []byte) string {
	if len(b) < 4 || b[1] != 0x80 {
		return ""
	}
	n := int(b[2])<<8 | int(b[3])
	body := b[4:]
	if n < len(body) {
		body = body[:n]
	}
	return cleanSerial(body)
}

// cleanSerial trims padding (spaces, NULs, newlines) around a serial.
func cleanSerial(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}

func scanNet(root string) ([]NIC, error) {
	classDir := filepath.Join(root, "class", "net")
	ents, err := os.ReadDir(classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	var nics []NIC
	for _, e := range ents {
		link := filepath.Join(classDir, e.Name())
		real, err := filepath.EvalSymlinks(link)
		if err != nil {
			continue
		}
		// Interfaces without a device (lo, bridges, bonds, veth,
		// net_failover masters) are not hardware the metadata describes.
		if !exists(filepath.Join(real, "device")) {
			continue
		}
		devPath, ok := relDevPath(root, real)
		if !ok || strings.HasPrefix(devPath, "/devices/virtual/") {
			continue
		}
		n := NIC{Name: e.Name(), DevPath: devPath, MAC: strings.ToLower(readAttr(filepath.Join(real, "address")))}
		n.Index, _ = strconv.Atoi(readAttr(filepath.Join(real, "ifindex")))
		for _, c := range strings.Split(devPath, "/") {
			if isPCIAddress(c) {
				n.PCI = append(n.PCI, c)
			}
		}
		nics = append(nics, n)
	}
	sort.Slice(nics, func(a, b int) bool { return nics[a].Name < nics[b].Name })
	return nics, nil
}

func scanVirtioFS(root string) VirtioFS {
	v := VirtioFS{}
	dir := filepath.Join(root, "fs", "virtiofs")
	if ents, err := os.ReadDir(dir); err == nil {
		v.TagsKnown = true
		v.Tags = map[string]bool{}
		for _, e := range ents {
			if tag := readAttr(filepath.Join(dir, e.Name(), "tag")); tag != "" {
				v.Tags[tag] = true
			}
		}
	}
	devs, _ := os.ReadDir(filepath.Join(root, "bus", "virtio", "devices"))
	for _, e := range devs {
		id, err := strconv.ParseUint(strings.TrimPrefix(readAttr(filepath.Join(root, "bus", "virtio", "devices", e.Name(), "device")), "0x"), 16, 32)
		if err == nil && id == virtioFSDeviceID {
			v.Devices++
		}
	}
	return v
}

// relDevPath turns a resolved sysfs path into a DEVPATH.
func relDevPath(root, real string) (string, bool) {
	rel, err := filepath.Rel(root, real)
	if err != nil || !strings.HasPrefix(rel, "devices"+string(filepath.Separator)) {
		return "", false
	}
	return "/" + filepath.ToSlash(rel), true
}

// readUevent parses a uevent file (KEY=value lines).
func readUevent(p string) map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile(p)
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	return out
}

// maxAttr bounds what is read of one attribute file (sysfs attributes
// are at most a page).
const maxAttr = 4096

func readRaw(p string) []byte {
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, maxAttr)
	n, _ := f.Read(b)
	return b[:n]
}

func readAttr(p string) string {
	return strings.TrimSpace(string(readRaw(p)))
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// isPCIAddress reports whether s is a PCI function's sysfs name,
// dddd:bb:ss.f in lower-case hex with a function 0-7: the form
// model.ParsePCIAddress accepts (TestIsPCIAddressAgreesWithModel), written
// here so that the agent does not link the host's instance model.
func isPCIAddress(s string) bool {
	if len(s) != len("dddd:bb:ss.f") || s[4] != ':' || s[7] != ':' || s[10] != '.' || s[11] < '0' || s[11] > '7' {
		return false
	}
	for i := 0; i < 10; i++ {
		if i == 4 || i == 7 {
			continue
		}
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
