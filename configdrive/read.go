package configdrive

import (
	"github.com/vmeta/vmeta/configdrive/driveread"
	"github.com/vmeta/vmeta/internal/metadata"
)

// ErrNoFilesystem is wrapped by Read's error when the image or device holds
// neither an ISO 9660 nor a FAT file system.
var ErrNoFilesystem = driveread.ErrNoFilesystem

// ErrLimit is wrapped by Read's error when a drive exceeds one of the
// reader's limits; the message names the limit.
var ErrLimit = driveread.ErrLimit

// Read opens an ISO 9660 or vfat image file or block device read-only (never
// O_EXCL, never mounting it) and returns every regular file in it as a tree,
// together with the volume label. See driveread.Read, which does the work
// (and driveread.ReadFile, which reads one file).
func Read(p string) (tree *metadata.Tree, label string, err error) {
	files, label, err := driveread.Read(p)
	if err != nil {
		return nil, "", err
	}
	return &metadata.Tree{Files: files}, label, nil
}
