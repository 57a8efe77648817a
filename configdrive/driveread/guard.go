package driveread

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/diskfs/go-diskfs/backend"
)

// Limits that keep Read bounded on a corrupt or hostile drive: the guest
// agent reads drives at boot and must never hang or exhaust memory there.
// go-diskfs trusts the sizes and links it finds on disk (a FAT cluster chain
// that loops is followed forever; a Rock Ridge continuation area that points
// at itself is read again and again; a claimed 4 GiB table is allocated), so
// Read checks the structures before handing them over and reads through a
// guard that counts every read.
const (
	// readMaxIO caps the bytes go-diskfs may read from the drive in one Read
	// (files are read once, directories once per path that crosses them).
	readMaxIO = 2 * readMaxBytes
	// readMaxIOCalls caps the number of reads: a 256 MiB file in 512-byte
	// FAT clusters takes 512 Ki of them.
	readMaxIOCalls = 1 << 20
	// readMaxFAT caps the size of one FAT (go-diskfs holds two copies and
	// a decoded table, about four times this, in memory). 16 MiB is a
	// FAT32 of 4 Mi clusters; a 64 MiB Nova drive has a 512 KiB FAT.
	readMaxFAT = 16 << 20
	// readMaxVolumeDescriptors caps the ISO 9660 volume descriptor set
	// (real images have two to four).
	readMaxVolumeDescriptors = 64
)

// ErrLimit is wrapped by Read's error when a drive exceeds one of the limits
// above; the message names the limit.
var ErrLimit = errors.New("drive exceeds a reader limit")

// guardedStorage is a read-only backend that fails every read once readMaxIO
// bytes or readMaxIOCalls reads have been made, and any single read larger
// than the drive. go-diskfs ignores some read errors (FAT file data), so the
// first failure sticks and Read checks it after each step.
type guardedStorage struct {
	backend.Storage
	size     int64
	maxBytes int64 // readMaxIO in Read
	maxCalls int   // readMaxIOCalls in Read
	bytes    int64
	calls    int
	err      error
}

// newGuard guards s, a drive of size bytes, with Read's limits.
func newGuard(s backend.Storage, size int64) *guardedStorage {
	return &guardedStorage{Storage: s, size: size, maxBytes: readMaxIO, maxCalls: readMaxIOCalls}
}

func (g *guardedStorage) ReadAt(p []byte, off int64) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	g.calls++
	g.bytes += int64(len(p))
	switch {
	case int64(len(p)) > g.size:
		// Not sticky: an oversized request is refused, not read.
		return 0, fmt.Errorf("%w: a read of %d bytes from a %d-byte drive", ErrLimit, len(p), g.size)
	case g.bytes > g.maxBytes:
		g.err = fmt.Errorf("%w: more than %d bytes read from the drive (readMaxIO)", ErrLimit, g.maxBytes)
	case g.calls > g.maxCalls:
		g.err = fmt.Errorf("%w: more than %d reads from the drive (readMaxIOCalls)", ErrLimit, g.maxCalls)
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.Storage.ReadAt(p, off)
}

// Read is refused: go-diskfs reads file systems with ReadAt only, and a
// stream read would bypass the count.
func (g *guardedStorage) Read([]byte) (int, error) {
	return 0, errors.New("configdrive: sequential read of a guarded drive")
}

// fatKind is one of the three readers go-diskfs has for FAT, with what Read
// checks before calling it.
type fatKind struct {
	name string
	// table returns where the reader will find the first FAT and how big
	// it will take it to be, computed with the reader's own (32-bit) arithmetic,
	// and how many copies it reads.
	table func(bs []byte) (start, size uint64, copies int)
	// entry returns FAT entry i as the reader decodes it, and the highest
	// cluster number it accepts.
	entries func(fat []byte) (entry func(i uint32) uint32, max uint32)
	eoc     func(v uint32) bool
}

// Offsets in a FAT boot sector.
const (
	bsBytesPerSector = 11 // uint16
	bsSecPerCluster  = 13
	bsReserved       = 14 // uint16
	bsSectorsPerFAT  = 22 // uint16, FAT12/16
	bsSectorsPerF32  = 36 // uint32, FAT32
)

func fat1216Table(bs []byte) (uint64, uint64, int) {
	bps := uint32(binary.LittleEndian.Uint16(bs[bsBytesPerSector:]))
	start := uint32(binary.LittleEndian.Uint16(bs[bsReserved:])) * bps
	return uint64(start), uint64(uint32(binary.LittleEndian.Uint16(bs[bsSectorsPerFAT:])) * bps), 1
}

var fatKinds = []fatKind{
	{
		name: "FAT32",
		table: func(bs []byte) (uint64, uint64, int) {
			bps := binary.LittleEndian.Uint16(bs[bsBytesPerSector:])
			start := uint64(binary.LittleEndian.Uint16(bs[bsReserved:])) * uint64(bps)
			return start, uint64(binary.LittleEndian.Uint32(bs[bsSectorsPerF32:]) * uint32(bps)), 2
		},
		entries: func(fat []byte) (func(uint32) uint32, uint32) {
			max := uint32(len(fat) / 4)
			return func(i uint32) uint32 {
				if i >= max {
					return 0
				}
				return binary.LittleEndian.Uint32(fat[4*i:])
			}, max
		},
		eoc: func(v uint32) bool { return v&0xFFFFFF8 == 0xFFFFFF8 },
	},
	{
		name:  "FAT16",
		table: fat1216Table,
		entries: func(fat []byte) (func(uint32) uint32, uint32) {
			max := uint32(len(fat) / 2)
			return func(i uint32) uint32 {
				if i >= max {
					return 0
				}
				return uint32(binary.LittleEndian.Uint16(fat[2*i:]))
			}, max
		},
		eoc: func(v uint32) bool { return v >= 0xFFF8 && v <= 0xFFFF },
	},
	{
		name:  "FAT12",
		table: fat1216Table,
		entries: func(fat []byte) (func(uint32) uint32, uint32) {
			return func(i uint32) uint32 {
				off := uint64(i) * 3 / 2
				if off+1 >= uint64(len(fat)) {
					return 0
				}
				w := uint32(fat[off]) | uint32(fat[off+1])<<8
				if i%2 == 0 {
					return w & 0xFFF
				}
				return w >> 4
			}, uint32(len(fat) * 2 / 3)
		},
		eoc: func(v uint32) bool { return v >= 0xFF8 && v <= 0xFFF },
	},
}

// checkFATSize reports whether the FAT a reader of kind k would load from
// boot sector bs is within the drive and within readMaxFAT.
func checkFATSize(k fatKind, bs []byte, size int64) error {
	if bs[bsSecPerCluster] == 0 {
		return fmt.Errorf("%s: zero sectors per cluster", k.name)
	}
	start, n, copies := k.table(bs)
	switch {
	case n == 0:
		return fmt.Errorf("%s: empty FAT", k.name)
	case n > readMaxFAT:
		return fmt.Errorf("%w: %s of %d bytes (readMaxFAT %d)", ErrLimit, k.name, n, readMaxFAT)
	case start+uint64(copies)*n > uint64(size):
		return fmt.Errorf("%s: FAT at %d (%d bytes x %d) beyond the end of the %d-byte drive", k.name, start, n, copies, size)
	}
	return nil
}

// checkFATChains reads the first FAT as a reader of kind k does and fails
// if any cluster chain loops (go-diskfs would follow it forever, growing a
// slice). Every chain of a valid FAT ends in an end-of-chain mark, a free or
// reserved value, or a cluster number out of range; so the "next cluster"
// graph has no cycle anywhere.
func checkFATChains(r interface {
	ReadAt([]byte, int64) (int, error)
}, k fatKind, bs []byte) error {
	start, n, _ := k.table(bs)
	fat := make([]byte, n)
	if _, err := r.ReadAt(fat, int64(start)); err != nil {
		return fmt.Errorf("%s: read FAT: %w", k.name, err)
	}
	entry, max := k.entries(fat)
	next := func(c uint32) (uint32, bool) {
		v := entry(c)
		if k.eoc(v) || v < 2 || v > max {
			return 0, false
		}
		return v, true
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]uint8, uint64(max)+1)
	for s := uint32(2); s <= max && s >= 2; s++ {
		if state[s] != unseen {
			continue
		}
		c := s
		for {
			state[c] = onPath
			v, ok := next(c)
			if !ok || state[v] == done {
				break
			}
			if state[v] == onPath {
				return fmt.Errorf("%s: cluster chain loops at cluster %d", k.name, v)
			}
			c = v
		}
		// Mark the path just walked as done.
		for c := s; state[c] == onPath; {
			state[c] = done
			v, ok := next(c)
			if !ok {
				break
			}
			c = v
		}
	}
	return nil
}

// Offsets in an ISO 9660 volume descriptor (ECMA-119 8.4, 8.5).
const (
	vdPathTableSize = 132 // uint32 LE
	vdPathTableL    = 140 // uint32 LE, in logical blocks
	vdRootRecord    = 156 // 34-byte directory record
	drExtent        = 2   // uint32 LE, in the directory record
	drDataLength    = 10  // uint32 LE
)

// checkISO reads the volume descriptor set as go-diskfs will, and fails if a
// primary or supplementary descriptor claims a block size other than 2048
// or a path table or root directory beyond the drive (go-diskfs allocates
// whatever size is claimed), or the set has no terminator within
// readMaxVolumeDescriptors.
func checkISO(r interface {
	ReadAt([]byte, int64) (int, error)
}, size int64) error {
	vd := make([]byte, isoBlock)
	for i := range readMaxVolumeDescriptors {
		off := int64(16+i) * isoBlock
		if _, err := r.ReadAt(vd, off); err != nil {
			return fmt.Errorf("volume descriptor %d: %w", i, err)
		}
		if string(vd[1:6]) != "CD001" {
			return fmt.Errorf("volume descriptor %d: no CD001 identifier", i)
		}
		switch vd[0] {
		case 255: // set terminator
			return nil
		case 1, 2: // primary, supplementary (Joliet)
			if bs := binary.LittleEndian.Uint16(vd[pvdLogicalBlock:]); bs != isoBlock {
				return fmt.Errorf("volume descriptor %d: logical block size %d, want %d", i, bs, isoBlock)
			}
			pt := int64(binary.LittleEndian.Uint32(vd[vdPathTableSize:]))
			ptAt := int64(binary.LittleEndian.Uint32(vd[vdPathTableL:])) * isoBlock
			root := vd[vdRootRecord:]
			rootAt := int64(binary.LittleEndian.Uint32(root[drExtent:])) * isoBlock
			rootLen := int64(binary.LittleEndian.Uint32(root[drDataLength:]))
			if ptAt+pt > size {
				return fmt.Errorf("volume descriptor %d: path table of %d bytes at %d beyond the end of the %d-byte drive", i, pt, ptAt, size)
			}
			if rootAt+rootLen > size {
				return fmt.Errorf("volume descriptor %d: root directory of %d bytes at %d beyond the end of the %d-byte drive", i, rootLen, rootAt, size)
			}
		}
	}
	return fmt.Errorf("%w: no volume descriptor set terminator in the first %d descriptors (readMaxVolumeDescriptors)", ErrLimit, readMaxVolumeDescriptors)
}
