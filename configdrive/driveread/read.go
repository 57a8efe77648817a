// Package driveread reads files from a config drive (an ISO 9660 or vfat
// image file or block device) without mounting it, bounded on a corrupt or
// hostile drive. It is the reading half of package configdrive, apart so
// that the guest agent reads a drive without linking the writer and the
// metadata renderer behind it.
package driveread

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/fat12"
	"github.com/diskfs/go-diskfs/filesystem/fat16"
	"github.com/diskfs/go-diskfs/filesystem/fat32"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

const (
	// isoBlock is ISO 9660's logical block size, used whatever the device's
	// sector size.
	isoBlock = 2048
	// fatSector is the FAT sector size of config drives.
	fatSector = 512
	// System area (16 blocks) + primary volume descriptor + terminator.
	isoHeaderBlocks = 16 + 2
	// Offsets in the primary volume descriptor (ECMA-119 8.4).
	pvdOffset          = 16 * isoBlock
	pvdVolumeSpaceSize = 80  // uint32 LE, in logical blocks
	pvdLogicalBlock    = 128 // uint16 LE
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
// ISO 9660 is always read with 2048-byte blocks, whatever sector size the
// device reports: go-diskfs's GetFilesystem passes a virtio-blk or loop
// device's 512-byte sectors and then fails, and misreads 4096 (go-diskfs
// issues #104/#107).
//
// Read is bounded on a corrupt or hostile drive (see the limits in
// readguard.go; an error wrapping ErrLimit names the one exceeded): it
// checks the FAT and ISO 9660 structures go-diskfs would trust (a looping
// cluster chain, a claimed multi-GiB table), reads through a guard that
// counts every read, and stops a file read that makes no progress. It does
// not look for partition tables, and tries only the FAT and ISO 9660
// readers. go-diskfs can panic on corrupt input; Read recovers and returns
// an error.
//
// Limitations (go-diskfs v1.9.4): a Rock Ridge name split over several NM
// entries, which genisoimage writes for names of about 147 bytes and more, is
// read as its first part only (config-drive names are short, and images built
// here store every name, at most 250 bytes, in one NM entry, moved whole to a
// continuation area when it does not fit in the directory record); an ISO
// with Joliet but without Rock Ridge fails to read below the first directory
// level.
func Read(p string) (files map[string][]byte, label string, err error) {
	err = open(p, func(fsys filesystem.FileSystem, size int64, g *guardedStorage) error {
		files, err = readTree(fsys, size, g)
		label = strings.TrimRight(fsys.Label(), " \x00")
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return files, label, nil
}

// ReadFile reads the one regular file name (a slash-separated path
// relative to the root, "openstack/latest/meta_data.json") like Read, but
// reads only the directories on its path and the file itself: the other
// files of the drive are neither read nor checked. A name that is not
// there, or not a regular file, is an error wrapping fs.ErrNotExist.
func ReadFile(p, name string) (data []byte, label string, err error) {
	err = open(p, func(fsys filesystem.FileSystem, size int64, g *guardedStorage) error {
		data, err = readOne(fsys, size, g, name)
		label = strings.TrimRight(fsys.Label(), " \x00")
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return data, label, nil
}

// open opens the drive at p and calls read with its file system, its size
// and the guard it reads through; a read error names p.
func open(p string, read func(filesystem.FileSystem, int64, *guardedStorage) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("configdrive: read %s: corrupt image (go-diskfs panicked: %v)", p, r)
		}
	}()
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("configdrive: %w", err)
	}
	defer f.Close()
	size, err := driveSize(f)
	if err != nil {
		return fmt.Errorf("configdrive: %s: %w", p, err)
	}
	g := newGuard(file.New(f, true), size)
	fsys, err := openFS(g, size)
	if err != nil {
		return fmt.Errorf("configdrive: %s: %w", p, err)
	}
	defer fsys.Close() // a no-op for read-only file systems
	if err := read(fsys, size, g); err != nil {
		return fmt.Errorf("configdrive: read %s: %w", p, err)
	}
	return nil
}

// readOne reads the regular file name of fsys, walking only its path.
func readOne(fsys filesystem.FileSystem, imageSize int64, g *guardedStorage, name string) ([]byte, error) {
	parts := strings.Split(name, "/")
	if len(parts) > readMaxDepth {
		return nil, fmt.Errorf("%w: %s nested deeper than %d levels (readMaxDepth)", ErrLimit, name, readMaxDepth)
	}
	dir := "."
	for i, part := range parts {
		if part == "" || part == "." || part == ".." {
			return nil, fmt.Errorf("%s: invalid path", name)
		}
		des, err := fsys.ReadDir(dir)
		if g.err != nil {
			return nil, fmt.Errorf("directory %s: %w", dir, g.err)
		}
		if err != nil {
			return nil, err
		}
		if len(des) > readMaxEntries {
			return nil, fmt.Errorf("%w: more than %d entries (readMaxEntries)", ErrLimit, readMaxEntries)
		}
		var found fs.DirEntry
		for _, de := range des {
			if de.Name() != part {
				continue
			}
			if found != nil {
				return nil, fmt.Errorf("%s: duplicate entry", path.Join(dir, part))
			}
			found = de
		}
		p := path.Join(dir, part)
		last := i == len(parts)-1
		switch {
		case found == nil:
			return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
		case !last && !found.IsDir(), last && !found.Type().IsRegular():
			return nil, fmt.Errorf("%s: not a %s: %w", p, map[bool]string{true: "regular file", false: "directory"}[last], fs.ErrNotExist)
		case !last:
			dir = p
			continue
		}
		info, err := found.Info()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if info.Size() > imageSize {
			return nil, fmt.Errorf("%s: size %d larger than the image", p, info.Size())
		}
		if info.Size() > readMaxBytes {
			return nil, fmt.Errorf("%w: more than %d bytes of files (readMaxBytes)", ErrLimit, readMaxBytes)
		}
		b, err := readFile(fsys, p, info.Size())
		if g.err != nil {
			return nil, fmt.Errorf("%s: %w", p, g.err)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%s: invalid path", name)
}

// ISOVolumeSize reads the volume size, in bytes, from the ISO 9660 primary
// volume descriptor at block 16 of r.
func ISOVolumeSize(r io.ReaderAt) (int64, error) {
	pvd := make([]byte, isoBlock)
	if _, err := r.ReadAt(pvd, pvdOffset); err != nil {
		return 0, fmt.Errorf("configdrive: read primary volume descriptor: %w", err)
	}
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" {
		return 0, fmt.Errorf("configdrive: no ISO 9660 primary volume descriptor at block 16")
	}
	blocks := int64(binary.LittleEndian.Uint32(pvd[pvdVolumeSpaceSize:]))
	bs := int64(binary.LittleEndian.Uint16(pvd[pvdLogicalBlock:]))
	if bs == 0 || blocks < isoHeaderBlocks {
		return 0, fmt.Errorf("configdrive: implausible volume size %d x %d in primary volume descriptor", blocks, bs)
	}
	return blocks * bs, nil
}

// driveSize returns the size of a regular file or block device.
func driveSize(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		if fi.Size() == 0 {
			return 0, fmt.Errorf("%w (empty file)", ErrNoFilesystem)
		}
		return fi.Size(), nil
	case m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0:
		size, err := f.Seek(0, io.SeekEnd)
		if err != nil {
			return 0, fmt.Errorf("size of block device: %w", err)
		}
		return size, nil
	default:
		return 0, fmt.Errorf("neither a block device nor a regular file (%v)", fi.Mode().Type())
	}
}

// openFS finds the file system on the whole drive b, as go-diskfs's
// GetFilesystem does (FAT32, FAT16, FAT12, then ISO 9660), after checking
// the structures each reader would trust.
func openFS(b *guardedStorage, size int64) (filesystem.FileSystem, error) {
	var why []string
	bs := make([]byte, fatSector)
	if _, err := b.ReadAt(bs, 0); err != nil {
		return nil, fmt.Errorf("read boot sector: %w", err)
	}
	readers := map[string]func() (filesystem.FileSystem, error){
		"FAT32": func() (filesystem.FileSystem, error) { return fat32.Read(b, size, 0, 0) },
		"FAT16": func() (filesystem.FileSystem, error) { return fat16.Read(b, size, 0, 0) },
		"FAT12": func() (filesystem.FileSystem, error) { return fat12.Read(b, size, 0, 0) },
	}
	for _, k := range fatKinds {
		if err := checkFATSize(k, bs, size); err != nil {
			// Not this kind, or one Read refuses: either way go on.
			why = append(why, err.Error())
			continue
		}
		fsys, err := readers[k.name]()
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", k.name, err))
			continue
		}
		if err := checkFATChains(b, k, bs); err != nil {
			return nil, err
		}
		return fsys, nil
	}
	if _, err := ISOVolumeSize(b); err != nil {
		why = append(why, err.Error())
		return nil, fmt.Errorf("%w (%s)", ErrNoFilesystem, strings.Join(why, "; "))
	}
	if err := checkISO(b, size); err != nil {
		return nil, fmt.Errorf("ISO 9660: %w", err)
	}
	fsys, err := readISO2048(b, size)
	if err != nil {
		return nil, fmt.Errorf("%w (ISO 9660: %w)", ErrNoFilesystem, err)
	}
	return fsys, nil
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

// readTree walks fsys from its root and reads every regular file. g, when
// not nil, is the guard fsys reads through: its first error ends the walk.
func readTree(fsys filesystem.FileSystem, imageSize int64, g *guardedStorage) (map[string][]byte, error) {
	t := map[string][]byte{}
	var total int64
	entries := 0
	guardErr := func() error {
		if g != nil {
			return g.err
		}
		return nil
	}
	// ISO 9660 directories by extent: a directory met twice (one that
	// contains itself or an ancestor) would be walked until the depth or
	// entry limit. FAT directories carry no such identity in go-diskfs;
	// there the limits, and the guard, bound the walk.
	seen := map[uint32]string{}
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		if depth > readMaxDepth {
			return fmt.Errorf("%w: directory %s nested deeper than %d levels (readMaxDepth)", ErrLimit, dir, readMaxDepth)
		}
		des, err := fsys.ReadDir(dir)
		if gerr := guardErr(); gerr != nil {
			return fmt.Errorf("directory %s: %w", dir, gerr)
		}
		if err != nil {
			return err
		}
		for _, de := range des {
			entries++
			if entries > readMaxEntries {
				return fmt.Errorf("%w: more than %d entries (readMaxEntries)", ErrLimit, readMaxEntries)
			}
			name := de.Name()
			if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
				return fmt.Errorf("directory %s: invalid entry name %q", dir, name)
			}
			p := path.Join(dir, name)
			info, err := de.Info()
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if info.Size() > imageSize {
				return fmt.Errorf("%s: size %d larger than the image", p, info.Size())
			}
			if de.IsDir() {
				if st, ok := info.Sys().(*iso9660.StatT); ok {
					if other, dup := seen[st.Location]; dup {
						return fmt.Errorf("directory %s: same extent (block %d) as %s: a directory loop", p, st.Location, other)
					}
					seen[st.Location] = p
				}
				if err := walk(p, depth+1); err != nil {
					return err
				}
				continue
			}
			if !de.Type().IsRegular() {
				continue // Rock Ridge symlinks, devices: not part of a config drive
			}
			total += info.Size()
			if total > readMaxBytes {
				return fmt.Errorf("%w: more than %d bytes of files (readMaxBytes)", ErrLimit, readMaxBytes)
			}
			if _, dup := t[p]; dup {
				return fmt.Errorf("%s: duplicate entry", p)
			}
			b, err := readFile(fsys, p, info.Size())
			if gerr := guardErr(); gerr != nil {
				return fmt.Errorf("%s: %w", p, gerr)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			t[p] = b
		}
		return nil
	}
	if err := walk(".", 0); err != nil {
		return nil, err
	}
	return t, nil
}

// readFile reads the size bytes of file p. A read that returns nothing and
// no error is an error here (go-diskfs v1.9.4 does that for a FAT file whose
// cluster chain is shorter than its size, which would make io.ReadFull spin).
func readFile(fsys filesystem.FileSystem, p string, size int64) ([]byte, error) {
	f, err := fsys.OpenFile(p, 0) // O_RDONLY
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := checkChainLength(fsys, f, size); err != nil {
		return nil, err
	}
	b := make([]byte, size)
	for n := 0; n < len(b); {
		m, err := f.Read(b[n:])
		n += m
		switch {
		case n == len(b):
		case errors.Is(err, io.EOF), m == 0 && err == nil:
			return nil, fmt.Errorf("read %d bytes: only %d there (cluster chain or extent shorter than the file)", size, n)
		case err != nil:
			return nil, fmt.Errorf("read %d bytes: %w", size, err)
		}
	}
	return b, nil
}

// checkChainLength fails if f is a FAT file whose cluster chain cannot hold
// its size bytes (go-diskfs v1.9.4 panics reading past the chain's end).
func checkChainLength(fsys filesystem.FileSystem, f filesystem.File, size int64) error {
	cf, ok := f.(interface{ GetClusterChain() ([]uint32, error) })
	bf, ok2 := fsys.(interface{ BytesPerCluster() int })
	if !ok || !ok2 || size == 0 {
		return nil
	}
	chain, err := cf.GetClusterChain()
	if err != nil {
		return fmt.Errorf("cluster chain: %w", err)
	}
	if have := int64(len(chain)) * int64(bf.BytesPerCluster()); have < size {
		return fmt.Errorf("cluster chain of %d clusters holds %d bytes, less than the file's %d", len(chain), have, size)
	}
	return nil
}
