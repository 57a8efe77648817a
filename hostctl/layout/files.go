package layout

import (
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/model"
)

// Host files of an instance, under <data dir>/instances/<name>/:
//
//	disk                  a flavor's root disk, over the image (Nova's name)
//	disk.eph0, disk.swap  a flavor's ephemeral and swap disks, over blank templates in instances/_base
//	disk-<target>.qcow2   each other disk (hostctl/images; over the spec's image for disks[0])
//	disk.config           the config drive (ISO 9660 or vfat)
//	console.log           the serial console (written by virtlogd)

// DiskFile is the name of disk d's image file in its instance's
// directory: Nova's names for a flavor's disks (every one qcow2),
// disk-<target>.qcow2 for the others.
func DiskFile(d model.Disk) string {
	switch d.Kind {
	case model.DiskKindRoot:
		return "disk"
	case model.DiskKindEphemeral:
		return "disk.eph0"
	case model.DiskKindSwap:
		return "disk.swap"
	}
	return "disk-" + d.Name + "." + images.DiskFormat
}
