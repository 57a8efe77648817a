package configdrive

import (
	"fmt"
	"time"

	"github.com/vmeta/vmeta/configdrive/internal/isowriter"
	"github.com/vmeta/vmeta/internal/metadata"
)

const isoBlock = isowriter.BlockSize

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
