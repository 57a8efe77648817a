package configdrive

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/vmeta/vmeta/internal/metadata"
)

const (
	isoBlock = 2048
	// System area (16 blocks) + primary volume descriptor + terminator.
	isoHeaderBlocks = 16 + 2
	// Smallest size go-diskfs's iso9660.Create accepts: system area, two
	// volume descriptors and one block.
	isoMinSize = 16*isoBlock + 2*isoBlock + isoBlock
	// Offsets in the primary volume descriptor (ECMA-119 8.4).
	pvdOffset          = 16 * isoBlock
	pvdVolumeSpaceSize = 80  // uint32 LE, in logical blocks
	pvdLogicalBlock    = 128 // uint16 LE
)

// buildISO writes an ISO 9660 image of files into f (an empty, writable
// file) and trims f to the volume size recorded in the primary volume
// descriptor, which it returns. Files must already be validated.
//
// go-diskfs (v1.9.4) quirks handled here:
//
//   - Rock Ridge must be on: without it names are ISO 9660 level 1
//     (OPENSTAC/2012_08_/META_DAT.JSO;1) and cloud-init cannot find
//     openstack/latest/meta_data.json.
//   - Joliet is off: go-diskfs's Joliet tree is corrupt below the first
//     directory level (isoinfo -J shows /openstack/____/_______, xorriso
//     fails with "Cannot convert from charset UTF-16BE"). Linux guests read
//     Rock Ridge; only Windows (cloudbase-init) would read Joliet, and a broken
//     Joliet tree is worse than none there (Windows then falls back to the
//     8.3 names).
//   - The volume label comes from FinalizeOptions.VolumeIdentifier;
//     FilesystemSpec.VolumeLabel is ignored for ISO 9660.
//   - Finalize deletes its workspace with os.RemoveAll, so it gets a fresh
//     directory of its own, which we also remove on every error path.
//   - diskfs.Create preallocates (truncates the file to) the size it is given
//     and never trims it. We call iso9660.Create on our own file instead, which
//     only sanity-checks the size (we pass an upper bound computed from the
//     content), and afterwards cut the file to the volume size in the PVD; this
//     also catches a short image, since Finalize discards several WriteAt
//     errors.
func buildISO(f *os.File, files []metadata.File, opts Options) (int64, error) {
	ws, err := os.MkdirTemp("", "vmeta-configdrive-ws-*")
	if err != nil {
		return 0, fmt.Errorf("configdrive: workspace: %w", err)
	}
	defer os.RemoveAll(ws) // Finalize removes it too; this covers every error path

	fsys, err := iso9660.Create(file.New(f, false), isoSizeBound(files), 0, isoBlock, ws)
	if err != nil {
		return 0, fmt.Errorf("configdrive: create iso9660: %w", err)
	}
	made := map[string]bool{".": true}
	for _, fl := range files {
		if d := path.Dir(fl.Path); !made[d] {
			if err := fsys.Mkdir(d); err != nil {
				return 0, fmt.Errorf("configdrive: mkdir %s: %w", d, err)
			}
			made[d] = true
		}
		w, err := fsys.OpenFile(fl.Path, os.O_CREATE|os.O_EXCL|os.O_WRONLY)
		if err != nil {
			return 0, fmt.Errorf("configdrive: create %s: %w", fl.Path, err)
		}
		_, err = w.Write(fl.Data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, fmt.Errorf("configdrive: write %s: %w", fl.Path, err)
		}
	}
	err = fsys.Finalize(iso9660.FinalizeOptions{
		RockRidge:           true,
		Joliet:              false, // broken in go-diskfs v1.9.4, see above
		VolumeIdentifier:    opts.Label,
		PublisherIdentifier: opts.Publisher,
	})
	if err != nil {
		return 0, fmt.Errorf("configdrive: finalize iso9660: %w", err)
	}
	size, err := isoVolumeSize(f)
	if err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("configdrive: %w", err)
	}
	if st.Size() < size {
		return 0, fmt.Errorf("configdrive: image is %d bytes, shorter than its volume size %d", st.Size(), size)
	}
	if err := f.Truncate(size); err != nil {
		return 0, fmt.Errorf("configdrive: trim image: %w", err)
	}
	return size, nil
}

// isoSizeBound is an upper bound of the image size of files: header, path
// tables, directories (every record at its 255-byte maximum plus a Rock Ridge
// continuation block per record) and file data in whole blocks.
func isoSizeBound(files []metadata.File) int64 {
	children := map[string]map[string]bool{".": {}}
	blocks := int64(isoHeaderBlocks)
	for _, f := range files {
		blocks += (int64(len(f.Data)) + isoBlock - 1) / isoBlock
		p := f.Path
		for p != "." {
			d := path.Dir(p)
			if children[d] == nil {
				children[d] = map[string]bool{}
			}
			children[d][path.Base(p)] = true
			p = d
		}
	}
	var pathTable int64
	for d, kids := range children {
		n := int64(len(kids)) + 2 // plus "." and ".."
		blocks += (n*255+isoBlock-1)/isoBlock + 1 + n
		pathTable += 8 + int64(len(path.Base(d))) + 1
	}
	blocks += 2 * ((pathTable + isoBlock - 1) / isoBlock) // L and M tables
	return max(blocks*isoBlock, isoMinSize)
}

// isoVolumeSize reads the volume size, in bytes, from the primary volume
// descriptor at block 16.
func isoVolumeSize(r io.ReaderAt) (int64, error) {
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

// isoLabel trims the NUL/space padding go-diskfs and genisoimage leave in the
// 32-byte volume identifier.
func isoLabel(s string) string { return strings.TrimRight(s, " \x00") }
