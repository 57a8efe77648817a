// Package qcow2 writes an empty qcow2 image in Go: the bytes `qemu-img
// create -f qcow2 PATH SIZE` writes (qemu-img 7.2 and later: version 3,
// 64 KiB clusters, 16-bit refcounts, no backing file). A blank disk of
// an apply is then a file write, not a qemu-img process each (issue 23
// item 4: four forks of qemu-img were most of an apply on a loaded
// host). Anything else — an overlay of an image or template, an
// encrypted disk, a size whose L1 table needs more than one cluster —
// is qemu-img's (hostctl/images, hostctl/encryption); the tests compare
// both byte for byte.
package qcow2

import (
	"encoding/binary"
	"fmt"
	"os"
)

const (
	clusterBits  = 16
	cluster      = 1 << clusterBits
	headerLength = 112                     // version 3 with the compression type byte, padded
	l1Covers     = cluster * (cluster / 8) // bytes one L1 entry maps (512 MiB)
	// MaxBlank is the largest size Blank writes: an L1 table of one
	// cluster (8192 entries of 512 MiB).
	MaxBlank = (cluster / 8) * l1Covers
)

// featureNames is the feature name table qemu-img writes (header
// extension 0x6803f857): type (0 incompatible, 1 compatible, 2
// autoclear), bit, name.
var featureNames = []struct {
	kind, bit byte
	name      string
}{
	{0, 0, "dirty bit"}, {0, 1, "corrupt bit"}, {0, 2, "external data file"}, {0, 3, "compression type"},
	{0, 4, "extended L2 entries"}, {1, 0, "lazy refcounts"}, {2, 0, "bitmaps"}, {2, 1, "raw external data"},
}

// Layout: the header and its extensions in cluster 0, the refcount
// table in cluster 1, its one refcount block in cluster 2 (clusters 0–3
// in use once), the L1 table (all zeros: nothing allocated) in cluster 3,
// the file ending with it (an image of size 0 has no L1 table: its file
// ends with cluster 2).
const (
	refTableOff = 1 * cluster
	refBlockOff = 2 * cluster
	l1Off       = 3 * cluster
)

// piece is bytes at an offset of the file.
type piece struct {
	off int64
	b   []byte
}

// blank returns the bytes of an empty qcow2 image of a virtual size of
// size bytes (rounded up to whole 512-byte sectors, as qemu-img does)
// that are not zeros, and the file's length: the rest is zeros.
func blank(size int64) ([]piece, int64, error) {
	if size < 0 || size > MaxBlank {
		return nil, 0, fmt.Errorf("qcow2: size %d: must be from 0 to %d bytes", size, int64(MaxBlank))
	}
	size = (size + 511) &^ 511
	l1 := (size + l1Covers - 1) / l1Covers
	be := binary.BigEndian

	h := make([]byte, headerLength+8+48*len(featureNames)+8)
	copy(h, "QFI\xfb")
	be.PutUint32(h[4:], 3) // version
	be.PutUint32(h[20:], clusterBits)
	be.PutUint64(h[24:], uint64(size))
	be.PutUint32(h[36:], uint32(l1))
	clusters := 3 // in use: the header's, the refcount table's and block's
	if l1 > 0 {   // and the L1 table's (none for a size of 0)
		be.PutUint64(h[40:], l1Off)
		clusters++
	}
	be.PutUint64(h[48:], refTableOff)
	be.PutUint32(h[56:], 1) // refcount table clusters
	be.PutUint32(h[96:], 4) // refcount_order: 16-bit refcounts
	be.PutUint32(h[100:], headerLength)
	ext := h[headerLength:]
	be.PutUint32(ext, 0x6803f857) // feature name table
	be.PutUint32(ext[4:], uint32(48*len(featureNames)))
	for i, f := range featureNames {
		e := ext[8+48*i:]
		e[0], e[1] = f.kind, f.bit
		copy(e[2:48], f.name)
	}
	// The end-of-extensions marker (type 0, length 0) is the 8 zeros left.

	refTable := be.AppendUint64(nil, refBlockOff)
	var refBlock []byte
	for range clusters {
		refBlock = be.AppendUint16(refBlock, 1)
	}
	return []piece{{0, h}, {refTableOff, refTable}, {refBlockOff, refBlock}}, l1Off + 8*l1, nil
}

// Image returns the whole file Create writes for size.
func Image(size int64) ([]byte, error) {
	pieces, length, err := blank(size)
	if err != nil {
		return nil, err
	}
	img := make([]byte, length)
	for _, p := range pieces {
		copy(img[p.off:], p.b)
	}
	return img, nil
}

// Create writes an empty qcow2 image of size bytes (0 to MaxBlank) at
// path — created, or truncated as qemu-img create does, mode 0644 less
// the umask; its zeros a hole — and syncs it. A failure may leave a
// partial file (the caller removes it).
func Create(path string, size int64) (err error) {
	pieces, length, err := blank(size)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("qcow2: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("qcow2: close %s: %w", path, cerr)
		}
	}()
	for _, p := range pieces {
		if _, err := f.WriteAt(p.b, p.off); err != nil {
			return fmt.Errorf("qcow2: write %s: %w", path, err)
		}
	}
	if err := f.Truncate(length); err != nil {
		return fmt.Errorf("qcow2: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("qcow2: sync %s: %w", path, err)
	}
	return nil
}
