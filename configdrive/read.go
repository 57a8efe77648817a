package configdrive

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/vmeta/vmeta/internal/metadata"
)

// Limits for Read, so that a corrupt or hostile image (directory loops,
// absurd sizes) cannot make it run away. Real config drives are a few hundred
// KiB and three levels deep.
const (
	readMaxDepth   = 32
	readMaxEntries = 1 << 16
	readMaxBytes   = 256 << 20 // total file content
)

// ErrNoFilesystem is wrapped by Read's error when the image or device holds
// neither an ISO 9660 nor a FAT file system.
var ErrNoFilesystem = errors.New("no ISO 9660 or vfat file system")

// Read opens an ISO 9660 or vfat image file or block device read-only (never
// O_EXCL, never mounting it) and returns every regular file in it, keyed by
// its slash-separated path relative to the root, together with the volume
// label (NUL/space padding trimmed). ISO names are the Rock Ridge names; an
// ISO without Rock Ridge is read with its plain ISO 9660 names
// (OPENSTAC/LATEST/META_DAT.JSO), which is not a usable config drive.
//
// ISO 9660 on block devices with 512-byte logical sectors (virtio-blk, loop
// devices), which go-diskfs's GetFilesystem refuses, is read with
// iso9660.Read and 2048-byte blocks over the read-only file backend.
//
// go-diskfs can panic on corrupt input; Read recovers and returns an error.
//
// Limitations (go-diskfs v1.9.4): a Rock Ridge name split over several NM
// entries, which genisoimage writes for names of about 147 bytes and more, is
// read as its first part only (config-drive names are short, and images built
// here store every name, at most 250 bytes, in one NM entry, moved whole to a
// continuation area when it does not fit in the directory record); an ISO
// with Joliet but without Rock Ridge fails to read below the first directory
// level.
func Read(p string) (tree *metadata.Tree, label string, err error) {
	defer func() {
		if r := recover(); r != nil {
			tree, label, err = nil, "", fmt.Errorf("configdrive: read %s: corrupt image (go-diskfs panicked: %v)", p, r)
		}
	}()
	d, err := diskfs.Open(p, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return nil, "", fmt.Errorf("configdrive: %w", err)
	}
	defer d.Close()

	var fsys filesystem.FileSystem
	if !d.DefaultBlocks && d.LogicalBlocksize != isoBlock && hasISOVolume(d.Backend) {
		// A block device whose sectors are not 2048 bytes holding an ISO:
		// GetFilesystem would call iso9660.Read with the device's physical
		// block size, which fails for 512 (virtio-blk, loop: "unknown
		// filesystem type") and misreads the volume for 4096. ISO 9660
		// blocks are 2048 bytes whatever the device; /dev/sr0 reports 2048
		// and takes the ordinary path (go-diskfs issues #104/#107).
		fsys, err = readISO2048(d.Backend, d.Size)
	} else {
		fsys, err = d.GetFilesystem(0)
	}
	if err != nil {
		return nil, "", fmt.Errorf("configdrive: %s: %w (%v)", p, ErrNoFilesystem, err)
	}
	defer fsys.Close() // a no-op for read-only file systems
	switch fsys.Type() {
	case filesystem.TypeISO9660, filesystem.TypeFat32, filesystem.TypeFat16, filesystem.TypeFat12:
	default:
		return nil, "", fmt.Errorf("configdrive: %s: %w (found file system type %v)", p, ErrNoFilesystem, fsys.Type())
	}
	tree, err = readTree(fsys, d.Size)
	if err != nil {
		return nil, "", fmt.Errorf("configdrive: read %s: %w", p, err)
	}
	return tree, strings.TrimRight(fsys.Label(), " \x00"), nil
}

// hasISOVolume reports whether r has an ISO 9660 primary volume descriptor
// at block 16.
func hasISOVolume(r io.ReaderAt) bool {
	_, err := isoVolumeSize(r)
	return err == nil
}

// readISO2048 reads an ISO 9660 file system with 2048-byte blocks from b,
// whatever sector size the device reports.
func readISO2048(b backend.Storage, size int64) (filesystem.FileSystem, error) {
	fsys, err := iso9660.Read(b, size, 0, isoBlock)
	if err != nil {
		return nil, err
	}
	return fsys, nil
}

// readTree walks fsys from its root and reads every regular file.
func readTree(fsys filesystem.FileSystem, imageSize int64) (*metadata.Tree, error) {
	t := &metadata.Tree{Files: map[string][]byte{}}
	var total int64
	entries := 0
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		if depth > readMaxDepth {
			return fmt.Errorf("directory %s: nested deeper than %d levels", dir, readMaxDepth)
		}
		des, err := fsys.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, de := range des {
			entries++
			if entries > readMaxEntries {
				return fmt.Errorf("more than %d entries", readMaxEntries)
			}
			name := de.Name()
			if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
				return fmt.Errorf("directory %s: invalid entry name %q", dir, name)
			}
			p := path.Join(dir, name)
			if de.IsDir() {
				if err := walk(p, depth+1); err != nil {
					return err
				}
				continue
			}
			if !de.Type().IsRegular() {
				continue // Rock Ridge symlinks, devices: not part of a config drive
			}
			info, err := de.Info()
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if info.Size() > imageSize {
				return fmt.Errorf("%s: size %d larger than the image", p, info.Size())
			}
			total += info.Size()
			if total > readMaxBytes {
				return fmt.Errorf("more than %d bytes of files", readMaxBytes)
			}
			if _, dup := t.Files[p]; dup {
				return fmt.Errorf("%s: duplicate entry", p)
			}
			b, err := readFile(fsys, p, info.Size())
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			t.Files[p] = b
		}
		return nil
	}
	if err := walk(".", 0); err != nil {
		return nil, err
	}
	return t, nil
}

func readFile(fsys filesystem.FileSystem, p string, size int64) ([]byte, error) {
	f, err := fsys.OpenFile(p, 0) // O_RDONLY
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("read %d bytes: %w", size, err)
	}
	return b, nil
}
