// Package configdrive builds and reads OpenStack-style config drives: the
// small read-only disk Nova attaches to an instance (libvirt "disk.config")
// holding the instance's metadata tree in Nova's layout
// (openstack/<version>/meta_data.json, ec2/latest/meta-data.json, …), which
// cloud-init's ConfigDrive datasource and cloudbase-init find by the volume
// label "config-2".
//
// Two formats are supported, like Nova's [DEFAULT]config_drive_format:
//
//   - ISO9660 (the default): ISO 9660 with Rock Ridge, volume identifier
//     "config-2", the equivalent of Nova's
//     "genisoimage -ldots -allow-lowercase -allow-multidot -l -r -J -V config-2"
//     without Joliet (see newISO), written by our own in-memory writer
//     (internal/isowriter).
//   - VFAT: a FAT32 file system labelled "config-2", written with
//     github.com/diskfs/go-diskfs.
//
// Images are built in-process: no genisoimage/mkfs binary, no loop mounts, no
// root, no temporary directories. Build writes a file atomically; WriteISO
// streams an ISO to a writer; Read opens an image file or a block device
// read-only (it never mounts; go-diskfs) and returns its files.
package configdrive

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vmeta/vmeta/configdrive/internal/isowriter"
	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/schema"
)

// Format is the file system of a config drive.
type Format string

const (
	// ISO9660 is ISO 9660 with Rock Ridge (Nova's default).
	ISO9660 Format = "iso9660"
	// VFAT is FAT32 (Nova's deprecated config_drive_format=vfat).
	VFAT Format = "vfat"
)

// Default option values.
const (
	DefaultLabel     = "config-2"
	DefaultPublisher = "vmeta"
)

// Options controls how a drive is built. The zero value builds an ISO 9660
// drive labelled "config-2" published by "vmeta".
type Options struct {
	Format    Format // default ISO9660
	Label     string // default "config-2"; cloud-init looks for "config-2" or "CONFIG-2"
	Publisher string // default "vmeta"; ISO 9660 publisher identifier, unused for vfat
}

func (o Options) withDefaults() (Options, error) {
	if o.Format == "" {
		o.Format = ISO9660
	}
	if o.Label == "" {
		o.Label = DefaultLabel
	}
	if o.Publisher == "" {
		o.Publisher = DefaultPublisher
	}
	switch o.Format {
	case ISO9660:
		// PVD volume identifier: 32 bytes; publisher identifier: 128 bytes.
		if err := checkIdentifier("label", o.Label, 32); err != nil {
			return o, err
		}
	case VFAT:
		// FAT volume label: 11 bytes in the boot sector and root directory.
		if err := checkIdentifier("label", o.Label, 11); err != nil {
			return o, err
		}
	default:
		return o, fmt.Errorf("configdrive: unknown format %q (want %q or %q)", o.Format, ISO9660, VFAT)
	}
	if err := checkIdentifier("publisher", o.Publisher, 128); err != nil {
		return o, err
	}
	return o, nil
}

// checkIdentifier accepts printable ASCII of at most max bytes.
func checkIdentifier(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("configdrive: %s %s longer than %d bytes", what, schema.QuoteValue(s), max)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("configdrive: %s %s: only printable ASCII allowed", what, schema.QuoteValue(s))
		}
	}
	return nil
}

// Limits on what Build accepts. Nova's drives are three levels deep; ISO 9660
// allows 8 directory levels before Rock Ridge relocation (RE/CL entries),
// which we neither need nor want to depend on in readers or in guests.
const (
	maxDepth       = isowriter.MaxDepth   // path components, file name included
	maxNameLenISO  = isowriter.MaxNameLen // 250: one Rock Ridge NM entry
	maxNameLenVFAT = 255                  // FAT long names
	maxFileSize    = isowriter.MaxFileSize
)

// buildSlots bounds concurrent builds. ISO images are laid out in memory (the
// metadata blocks; file data is streamed from the caller's slices) and vfat
// images are written through go-diskfs; neither needs temporary directories
// any more (unbounded parallel VM starts filled /tmp, a tmpfs, in Incus:
// lxc/incus#3191). The bound is kept for memory and for the disk: a burst of
// VM starts then makes at most four images and fsyncs at a time, while
// still overlapping I/O. WriteISO holds a slot only while laying out, not
// while a possibly slow writer drains the image.
var buildSlots = make(chan struct{}, 4)

func acquire() func() {
	buildSlots <- struct{}{}
	return func() { <-buildSlots }
}

// Build writes a drive holding files (already in Nova's config-drive layout,
// e.g. from metadata.Tree.ConfigDriveFiles) to path, atomically: the image is
// built in a temporary file in path's directory, synced, renamed over path,
// and the directory is synced. On any error the temporary file is removed and
// an existing file at path is left untouched (except when only the final
// directory sync fails: the new image is then in place, but Build still
// reports the error). The file is created with mode 0600 (drives carry user
// data and possibly an admin password); the caller grants the hypervisor
// access.
func Build(path string, files []metadata.File, opts Options) (err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return err
	}
	if err := validateFiles(files, opts.Format); err != nil {
		return err
	}
	defer acquire()()
	var iso *isowriter.Image
	if opts.Format == ISO9660 {
		if iso, err = newISO(files, opts, time.Time{}); err != nil {
			return err
		}
	}

	err = atomicfile.Write(path, 0o600, func(f *os.File) error {
		if opts.Format == VFAT {
			return buildVFAT(f, files, opts)
		}
		_, err := iso.WriteTo(f)
		return err
	})
	if err != nil {
		return fmt.Errorf("configdrive: %w", err)
	}
	return nil
}

// WriteISO builds an ISO 9660 image of files (opts.Format must be empty or
// ISO9660) in memory and streams it to w, e.g. an HTTP response serving a
// drive. It returns the number of bytes written to w; the image is the same
// as Build's, byte for byte apart from the recording times.
func WriteISO(w io.Writer, files []metadata.File, opts Options) (int64, error) {
	if opts.Format != "" && opts.Format != ISO9660 {
		return 0, fmt.Errorf("configdrive: WriteISO writes ISO 9660 only, not %q", opts.Format)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return 0, err
	}
	if err := validateFiles(files, ISO9660); err != nil {
		return 0, err
	}
	release := acquire()
	iso, err := newISO(files, opts, time.Time{})
	release()
	if err != nil {
		return 0, err
	}
	n, err := iso.WriteTo(w)
	if err != nil {
		return n, fmt.Errorf("configdrive: write image: %w", err)
	}
	return n, nil
}

// validateFiles checks every path: relative, clean, no "." or ".." or empty
// components, no duplicates, no file that is also used as a directory, no
// names that the formats or our reader (go-diskfs) would alter. Errors name
// the path.
func validateFiles(files []metadata.File, format Format) error {
	if len(files) == 0 {
		return errors.New("configdrive: no files")
	}
	seen := make(map[string]bool, len(files)) // path -> is a directory
	folded := make(map[string]string)         // case-folded path -> path (vfat)
	for _, f := range files {
		p := f.Path
		bad := func(why string) error {
			return fmt.Errorf("configdrive: invalid path %q: %s", p, why)
		}
		switch {
		case p == "":
			return bad("empty")
		case strings.HasPrefix(p, "/"):
			return bad("absolute")
		case !utf8.ValidString(p):
			return bad("not valid UTF-8")
		case path.Clean(p) != p:
			return bad("not clean (want " + fmt.Sprintf("%q", path.Clean(p)) + ")")
		}
		comps := strings.Split(p, "/")
		if len(comps) > maxDepth {
			return bad(fmt.Sprintf("deeper than %d levels", maxDepth))
		}
		for _, c := range comps {
			if err := checkName(c, format); err != "" {
				return bad(err)
			}
		}
		if int64(len(f.Data)) > maxFileSize {
			return bad("larger than 4 GiB - 1 (ISO 9660 single extent / FAT32 limit)")
		}
		if isDir, dup := seen[p]; dup {
			if isDir {
				return bad("is also a directory of another path")
			}
			return bad("duplicate")
		}
		seen[p] = false
		for i := 1; i < len(comps); i++ {
			d := strings.Join(comps[:i], "/")
			if isDir, ok := seen[d]; ok && !isDir {
				return bad(fmt.Sprintf("its parent %q is also a file", d))
			}
			seen[d] = true
		}
		if format == VFAT {
			// FAT names are case-insensitive: "A" and "a" are the same file.
			k := strings.ToLower(p)
			if other, ok := folded[k]; ok {
				return bad(fmt.Sprintf("same name as %q on a case-insensitive vfat drive", other))
			}
			folded[k] = p
		}
	}
	return nil
}

// checkName returns why a path component is not acceptable, or "".
func checkName(c string, format Format) string {
	switch {
	case c == "":
		return "empty component"
	case c == "." || c == "..":
		return fmt.Sprintf("%q component", c)
	case format != VFAT && len(c) > maxNameLenISO:
		// One Rock Ridge NM entry: go-diskfs v1.9.4 reads a name split
		// over several entries as its first part only.
		return fmt.Sprintf("component longer than %d bytes (ISO 9660 Rock Ridge name limit)", maxNameLenISO)
	case len(c) > maxNameLenVFAT:
		return fmt.Sprintf("component longer than %d bytes", maxNameLenVFAT)
	case strings.HasPrefix(c, ".") || strings.HasSuffix(c, "."):
		// go-diskfs's ISO reader strips a leading and trailing "." from
		// file names, and FAT drops trailing dots: such names would not
		// round-trip. Config drives never use them.
		return "component starts or ends with \".\""
	}
	for _, r := range c {
		if r < 0x20 || r == 0x7f {
			return "control character"
		}
		if format == VFAT && strings.ContainsRune(`"*:<>?\|`, r) {
			return fmt.Sprintf("character %q not allowed on vfat", r)
		}
	}
	return ""
}
