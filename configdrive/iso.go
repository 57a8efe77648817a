package configdrive

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/vmeta/vmeta/configdrive/internal/isowriter"
	"github.com/vmeta/vmeta/internal/metadata"
)

const (
	isoBlock = isowriter.BlockSize
	// System area (16 blocks) + primary volume descriptor + terminator.
	isoHeaderBlocks = 16 + 2
	// Offsets in the primary volume descriptor (ECMA-119 8.4).
	pvdOffset          = 16 * isoBlock
	pvdVolumeSpaceSize = 80  // uint32 LE, in logical blocks
	pvdLogicalBlock    = 128 // uint16 LE
)

// newISO lays out an ISO 9660 + Rock Ridge image of files (already
// validated) in memory; see package isowriter for the format. now is the
// recording time (zero: time.Now), for reproducible images in tests.
//
// The image is what Nova's genisoimage command line produces without -J:
// Rock Ridge names, modes and times as "genisoimage -r" records them (read
// only, uid/gid 0), volume identifier opts.Label as given (blkid reports
// LABEL="config-2"), publisher opts.Publisher, no 150-block tail padding.
// No Joliet (as before, with go-diskfs, whose Joliet tree was corrupt):
// Linux guests read Rock Ridge. A reader that ignores Rock Ridge sees the
// ISO 9660 names, Nova's names in upper case with characters outside
// [A-Za-z0-9_] replaced by "_" (openstack/latest/meta_data.json is
// OPENSTACK/LATEST/META_DATA.JSON;1, ec2/latest/meta-data.json is
// EC2/LATEST/META_DATA.JSON;1).
func newISO(files []metadata.File, opts Options, now time.Time) (*isowriter.Image, error) {
	im, err := isowriter.New(files, isowriter.Options{
		VolumeID:  opts.Label,
		Publisher: opts.Publisher,
		Time:      now,
	})
	if err != nil {
		return nil, fmt.Errorf("configdrive: %w", err)
	}
	return im, nil
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
