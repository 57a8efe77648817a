package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vmeta/vmeta/configdrive/driveread"
)

// Labels a config drive carries (cloud-init accepts both).
var driveLabels = []string{"config-2", "CONFIG-2"}

// ErrNoDrive is returned by ConfigDrive.Fetch when no block device carries
// a config drive label.
var ErrNoDrive = errors.New("no config drive (no block device labelled config-2)")

// Label reads the volume label of an ISO 9660 or FAT file system from r,
// the way blkid would but only for these two: the ISO 9660 primary
// volume descriptor (block 16 of 2048 bytes, whatever the device's sector
// size) and the FAT boot sector (FAT32 at offset 71, FAT12/16 at 43). It
// returns the file system type ("iso9660", "vfat") and the label with its
// padding trimmed, or "" for neither.
func Label(r io.ReaderAt) (fstype, label string) {
	var pvd [72]byte
	if n, _ := r.ReadAt(pvd[:], 16*2048); n == len(pvd) && pvd[0] == 1 && string(pvd[1:6]) == "CD001" {
		return "iso9660", strings.TrimRight(string(pvd[40:72]), " \x00")
	}
	var bs [512]byte
	if n, _ := r.ReadAt(bs[:], 0); n == len(bs) && bs[510] == 0x55 && bs[511] == 0xaa {
		switch {
		case string(bs[82:87]) == "FAT32":
			return "vfat", strings.TrimRight(string(bs[71:82]), " \x00")
		case string(bs[54:59]) == "FAT12" || string(bs[54:59]) == "FAT16":
			return "vfat", strings.TrimRight(string(bs[43:54]), " \x00")
		}
	}
	return "", ""
}

// IsDriveLabel reports whether label marks a config drive.
func IsDriveLabel(label string) bool {
	for _, l := range driveLabels {
		if label == l {
			return true
		}
	}
	return false
}

// ConfigDrive reads the document from a config drive.
type ConfigDrive struct {
	// Path, when set, is the image file or block device to read; else
	// the drive is looked for among the block devices.
	Path string
	// SysRoot and DevRoot locate sysfs and the device nodes ("/sys",
	// "/dev" when empty).
	SysRoot, DevRoot string
}

func (c *ConfigDrive) String() string {
	if c.Path != "" {
		return "config drive " + c.Path
	}
	return "config drive (by label)"
}

// Find returns the device nodes that carry a config drive label, whole
// disks and partitions, cdroms first (sr*), then by name.
func (c *ConfigDrive) Find() ([]string, error) {
	sys, dev := c.SysRoot, c.DevRoot
	if sys == "" {
		sys = "/sys"
	}
	if dev == "" {
		dev = "/dev"
	}
	ents, err := os.ReadDir(filepath.Join(sys, "class", "block"))
	if err != nil {
		return nil, fmt.Errorf("list block devices: %w", err)
	}
	var found []string
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, "ram") || strings.HasPrefix(name, "zram") {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(sys, "class", "block", name, "size")); err == nil && strings.TrimSpace(string(b)) == "0" {
			continue // no medium (empty cdrom tray, unused loop device)
		}
		p := filepath.Join(dev, devName(sys, name))
		f, err := os.Open(p)
		if err != nil {
			continue // no medium, no permission, gone
		}
		_, label := Label(f)
		f.Close()
		if IsDriveLabel(label) {
			found = append(found, p)
		}
	}
	sort.SliceStable(found, func(i, j int) bool {
		ci, cj := strings.HasPrefix(filepath.Base(found[i]), "sr"), strings.HasPrefix(filepath.Base(found[j]), "sr")
		if ci != cj {
			return ci
		}
		return found[i] < found[j]
	})
	return found, nil
}

// devName is the node name of block device name (DEVNAME from uevent).
func devName(sys, name string) string {
	b, err := os.ReadFile(filepath.Join(sys, "class", "block", name, "uevent"))
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "DEVNAME="); ok && v != "" {
				return v
			}
		}
	}
	return name
}

// Fetch finds the drive (unless Path is set) and reads
// openstack/latest/meta_data.json from it without mounting it, and only
// that file (and the directories on its path). When
// several devices carry the label, the first (a cdrom before disks) is
// read, as cloud-init does.
func (c *ConfigDrive) Fetch(ctx context.Context) (*Document, error) {
	p := c.Path
	if p == "" {
		found, err := c.Find()
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, ErrNoDrive
		}
		p = found[0]
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, label, err := driveread.ReadFile(p, MetaDataPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("config drive %s: %w: no %s (%w)", p, ErrInvalid, MetaDataPath, err)
	}
	if err != nil {
		return nil, fmt.Errorf("config drive %s: %w", p, err)
	}
	if c.Path == "" && !IsDriveLabel(label) {
		return nil, fmt.Errorf("config drive %s: label changed to %q while reading", p, label)
	}
	doc, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config drive %s: %w", p, err)
	}
	doc.Origin, doc.Source = "config drive "+p, KindDrive
	return doc, nil
}
