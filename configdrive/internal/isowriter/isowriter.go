// Package isowriter writes ISO 9660 images with Rock Ridge extensions in
// memory, in one pass over a precomputed layout: the image equivalent of
// "genisoimage -r -V <label> <dir>" for a tree given as a list of files, with
// no staging directory, no temporary files and no padding.
//
// What is written (ECMA-119 with SUSP 1.10 / RRIP 1.09, as genisoimage -r):
//
//	block 0-15   system area, zeros
//	block 16     primary volume descriptor
//	block 17     volume descriptor set terminator
//	             type L path table, then type M path table
//	             directories, in path table order (each starts on a block)
//	             continuation areas (the root's ER entry, long Rock Ridge names)
//	             file data, in directory order, each file starting on a block
//
// The image ends at the last block of the last file: its size is exactly the
// volume space size in the primary volume descriptor times 2048.
//
// ISO 9660 names are level 2 ("NAME.EXT;1", at most 30 characters of name
// and extension; directories at most 31 characters), upper case
// [A-Z0-9_], unique within their directory; readers use the Rock Ridge NM
// names, which carry the real names. Every record has RR, NM (except "." and
// ".."), PX (directories 040555, files 0100444, uid and gid 0, as genisoimage
// -r) and TF (modification, access and attribute change times) entries. A
// name that does not fit in its directory record (about 115 bytes and
// longer) goes, as a single NM entry, to a continuation area; a single NM
// entry limits names to MaxNameLen bytes. No Joliet, no El Torito, no
// directory relocation (depth is limited to ISO 9660's eight levels).
//
// The output is a function of the files (not of their order) and of
// Options.Time.
package isowriter

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmeta/vmeta/internal/metadata"
)

// Limits.
const (
	// BlockSize is the logical block size.
	BlockSize = 2048
	// MaxNameLen is the longest name component, in bytes: one Rock Ridge NM
	// entry (a 255-byte SUSP entry with a 5-byte header). Longer names would
	// need several NM entries, which go-diskfs v1.9.4 reads as the first
	// part only.
	MaxNameLen = 255 - 5
	// MaxDepth is the number of path components, the file included: ISO
	// 9660's eight directory levels (the root is the first), without Rock
	// Ridge relocation.
	MaxDepth = 8
	// MaxFileSize is the largest file: a single extent.
	MaxFileSize = 1<<32 - 1
)

// Options are the volume's identification and time.
type Options struct {
	VolumeID  string    // volume identifier, stored as given (at most 32 bytes)
	Publisher string    // publisher identifier (at most 128 bytes)
	Time      time.Time // recording time of everything; zero means time.Now()
}

const (
	systemID      = "LINUX"
	applicationID = "VMETA CONFIGDRIVE"

	firstFreeBlock = 18 // after the system area, the PVD and the terminator

	// Rock Ridge entry sizes.
	lenSP = 7
	lenRR = 5
	lenPX = 36 // RRIP 1.09: no file serial number
	lenTF = 5 + 3*7
	lenCE = 28
	lenNM = 5 // plus the name

	maxRecord = 254 // a directory record's length is a byte, and even

	rrPX = 0x01 // RR flags: the entries present
	rrNM = 0x08
	rrTF = 0x80

	modeDir  = 0o040555
	modeFile = 0o100444
)

// The ER entry genisoimage writes.
const (
	erID         = "RRIP_1991A"
	erDescriptor = "THE ROCK RIDGE INTERCHANGE PROTOCOL PROVIDES SUPPORT FOR POSIX FILE SYSTEM SEMANTICS"
	erSource     = "PLEASE CONTACT DISC PUBLISHER FOR SPECIFICATION SOURCE.  SEE PUBLISHER IDENTIFIER IN PRIMARY VOLUME DESCRIPTOR FOR CONTACT INFORMATION."
	lenER        = 8 + len(erID) + len(erDescriptor) + len(erSource)
)

// Image is a laid-out ISO 9660 image, ready to be written.
type Image struct {
	head  []byte  // blocks 0 up to the first file's data
	files []*node // regular files with data, in extent order
	size  int64   // bytes
}

// Size is the image size in bytes (volume space size times BlockSize).
func (im *Image) Size() int64 { return im.size }

type node struct {
	name   string // Rock Ridge name (path component); "" for the root
	parent *node
	isDir  bool
	data   []byte
	kids   []*node // directories: sorted by ISO identifier once laid out
	nsub   int     // directories: number of subdirectories

	id      []byte // ISO 9660 identifier as recorded
	idName  string // identifier parts for ordering (ECMA-119 9.3)
	idExt   string
	recLen  int  // length of this node's record in its parent
	nmInCE  bool // the NM entry is in a continuation area
	ceBlock uint32
	ceOff   uint32

	num    uint16 // directories: path table number
	extent uint32
	size   uint32 // data length (directories: whole blocks)
}

// New lays out an image of files. Paths are slash-separated, relative and
// clean (no ".", ".." or empty components); a path must not be both a file
// and a directory. The caller validates names (see configdrive); New returns
// an error for what would make the image invalid.
func New(files []metadata.File, opts Options) (*Image, error) {
	if len(opts.VolumeID) > 32 || len(opts.Publisher) > 128 {
		return nil, errors.New("isowriter: volume or publisher identifier too long")
	}
	t := opts.Time
	if t.IsZero() {
		t = time.Now()
	}
	t = t.UTC()
	if y := t.Year(); y < 1900 || y > 2155 {
		return nil, fmt.Errorf("isowriter: time %v not representable in a directory record", t)
	}
	root, err := tree(files)
	if err != nil {
		return nil, err
	}
	l := &layout{t: t, opts: opts}
	if err := l.plan(root); err != nil {
		return nil, err
	}
	return l.write(), nil
}

// tree builds the directory tree of files.
func tree(files []metadata.File) (*node, error) {
	if len(files) == 0 {
		return nil, errors.New("isowriter: no files")
	}
	root := &node{isDir: true}
	dirs := map[string]*node{"": root}
	for _, f := range files {
		if int64(len(f.Data)) > MaxFileSize {
			return nil, fmt.Errorf("isowriter: %s: larger than %d bytes", f.Path, int64(MaxFileSize))
		}
		if f.Path == "" {
			return nil, errors.New("isowriter: empty path")
		}
		parent, depth := root, 1
		rest := f.Path
		for {
			i := strings.IndexByte(rest, '/')
			if i < 0 {
				break
			}
			depth++
			dirPath := f.Path[:len(f.Path)-len(rest)+i]
			d := dirs[dirPath]
			if d == nil {
				name := rest[:i]
				if err := checkName(f.Path, name); err != nil {
					return nil, err
				}
				d = &node{name: name, parent: parent, isDir: true}
				dirs[dirPath] = d
				parent.kids = append(parent.kids, d)
				parent.nsub++
			}
			if !d.isDir {
				return nil, fmt.Errorf("isowriter: %s: %s is a file", f.Path, dirPath)
			}
			parent, rest = d, rest[i+1:]
		}
		if depth > MaxDepth {
			return nil, fmt.Errorf("isowriter: %s: deeper than %d levels", f.Path, MaxDepth)
		}
		if err := checkName(f.Path, rest); err != nil {
			return nil, err
		}
		if _, dup := dirs[f.Path]; dup {
			return nil, fmt.Errorf("isowriter: %s: duplicate, or also a directory", f.Path)
		}
		n := &node{name: rest, parent: parent, data: f.Data, size: uint32(len(f.Data))}
		dirs[f.Path] = n // files share the map: a later "f.Path/x" then fails
		parent.kids = append(parent.kids, n)
	}
	return root, nil
}

func checkName(p, name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("isowriter: %s: invalid component %q", p, name)
	case len(name) > MaxNameLen:
		return fmt.Errorf("isowriter: %s: component longer than %d bytes", p, MaxNameLen)
	}
	return nil
}

type layout struct {
	t    time.Time
	opts Options

	dirs     []*node // path table order
	files    []*node // data order (non-empty files)
	ptSize   int     // path table size in bytes
	ptBlocks uint32  // blocks per path table
	lPT, mPT uint32  // path table locations
	ceFirst  uint32  // first continuation block
	ceBlocks uint32
	ceUsed   uint32 // bytes used in the last continuation block
	rootCE   [2]uint32
	blocks   uint32 // volume space size
}

// plan assigns ISO identifiers, orders directories and records, sizes
// directories and assigns every extent.
func (l *layout) plan(root *node) error {
	// Path table order (ECMA-119 9.4): breadth first, children in
	// identifier order, which is by level, then parent number, then name.
	l.dirs = append(l.dirs, root)
	for i := 0; i < len(l.dirs); i++ {
		d := l.dirs[i]
		if i+1 > 0xffff {
			return errors.New("isowriter: more than 65535 directories")
		}
		d.num = uint16(i + 1)
		assignIDs(d.kids)
		for _, k := range d.kids {
			if k.isDir {
				l.dirs = append(l.dirs, k)
			}
		}
		l.ptSize += 8 + len(d.pathTableID()) + len(d.pathTableID())%2
	}
	l.ptBlocks = blocksFor(int64(l.ptSize))
	l.lPT = firstFreeBlock
	l.mPT = l.lPT + l.ptBlocks
	next := l.mPT + l.ptBlocks

	// Directory sizes and extents. Continuation areas are numbered from 0
	// here and moved behind the directories afterwards.
	l.allocCE(lenER, &l.rootCE)
	for _, d := range l.dirs {
		off := 0
		put := func(n int) {
			if off%BlockSize+n > BlockSize {
				off += BlockSize - off%BlockSize
			}
			off += n
		}
		put(selfLen(d == root))
		put(selfLen(false))
		for _, k := range d.kids {
			k.recLen = childLen(len(k.id), len(k.name), false)
			if k.recLen > maxRecord {
				k.nmInCE = true
				k.recLen = childLen(len(k.id), len(k.name), true)
				var ref [2]uint32
				l.allocCE(lenNM+len(k.name), &ref)
				k.ceBlock, k.ceOff = ref[0], ref[1]
			}
			put(k.recLen)
		}
		d.extent = next
		nb := blocksFor(int64(off))
		d.size = nb * BlockSize
		next += nb
	}
	l.ceFirst = next
	next += l.ceBlocks
	l.rootCE[0] += l.ceFirst
	for _, d := range l.dirs {
		for _, k := range d.kids {
			if k.nmInCE {
				k.ceBlock += l.ceFirst
			}
		}
	}

	// File data, in directory order.
	for _, d := range l.dirs {
		for _, k := range d.kids {
			if k.isDir {
				continue
			}
			if len(k.data) == 0 {
				// No data, no block. genisoimage points empty files at the
				// next file's block instead; a reader reads nothing for a
				// size of 0 either way (checked: xorriso -abort_on WARNING,
				// isoinfo -x, go-diskfs).
				k.extent = 0
				continue
			}
			k.extent = next
			l.files = append(l.files, k)
			nb := blocksFor(int64(len(k.data)))
			if uint64(next)+uint64(nb) > 0xffffffff {
				return errors.New("isowriter: image larger than 2^32 blocks")
			}
			next += nb
		}
	}
	l.blocks = next
	return nil
}

// allocCE reserves n bytes of continuation area that do not cross a block
// boundary (Linux and SUSP require a continuation area within one block)
// and stores its (relative block, offset) in ref.
func (l *layout) allocCE(n int, ref *[2]uint32) {
	if l.ceBlocks == 0 || int(l.ceUsed)+n > BlockSize {
		l.ceBlocks++
		l.ceUsed = 0
	}
	ref[0], ref[1] = l.ceBlocks-1, l.ceUsed
	l.ceUsed += uint32(n)
}

func blocksFor(n int64) uint32 { return uint32((n + BlockSize - 1) / BlockSize) }

// Record lengths: 33 fixed bytes, the identifier, a padding byte after an
// identifier of even length, the System Use field, a final padding byte to
// keep the length even.
func recordLen(idLen, suLen int) int {
	n := 33 + idLen + 1 - idLen%2 + suLen
	return n + n%2
}

func selfLen(root bool) int {
	su := lenRR + lenPX + lenTF
	if root {
		su += lenSP + lenCE
	}
	return recordLen(1, su)
}

func childLen(idLen, nameLen int, nmInCE bool) int {
	if nmInCE {
		return recordLen(idLen, lenRR+lenPX+lenTF+lenCE)
	}
	return recordLen(idLen, lenRR+lenNM+nameLen+lenPX+lenTF)
}

func (n *node) pathTableID() []byte {
	if n.parent == nil {
		return []byte{0}
	}
	return n.id
}

// assignIDs gives kids unique ISO 9660 identifiers and sorts them by
// identifier (ECMA-119 9.3). Clashes (names differing only in case or in
// characters outside [A-Z0-9_], or truncated alike) are resolved in name
// order by replacing the end of the name part with a number, as genisoimage
// does.
func assignIDs(kids []*node) {
	slices.SortFunc(kids, func(a, b *node) int { return strings.Compare(a.name, b.name) })
	used := make(map[string]bool, len(kids))
	var next map[string]int // natural identifier -> next number to try
	for _, k := range kids {
		name, ext := isoName(k.name, k.isDir)
		id := joinID(name, ext, k.isDir)
		if used[id] {
			if next == nil {
				next = map[string]int{}
			}
			natural := id
			for i := next[natural]; ; i++ {
				suffix := strconv.Itoa(i)
				if len(suffix) < 3 {
					suffix = "000"[len(suffix):] + suffix
				}
				limit := 31
				if !k.isDir {
					limit = 30 - len(ext)
				}
				n := name[:min(len(name), limit-len(suffix))] + suffix
				if id = joinID(n, ext, k.isDir); !used[id] {
					next[natural] = i + 1
					name = n
					break
				}
			}
		}
		used[id] = true
		k.id = []byte(id)
		k.idName, k.idExt = name, ext
	}
	// Identifiers are [A-Z0-9_.;] only, all above the padding character
	// 0x20, so comparing name and extension as plain strings is the
	// padded comparison of ECMA-119 9.3. A directory "X" and a file "X."
	// tie on both; the directory goes first.
	slices.SortFunc(kids, func(a, b *node) int {
		if c := strings.Compare(a.idName, b.idName); c != 0 {
			return c
		}
		if c := strings.Compare(a.idExt, b.idExt); c != 0 {
			return c
		}
		switch {
		case a.isDir == b.isDir:
			return 0
		case a.isDir:
			return -1
		}
		return 1
	})
}

func joinID(name, ext string, isDir bool) string {
	if isDir {
		return name
	}
	return name + "." + ext + ";1"
}

// isoName maps a Rock Ridge name to the name and extension parts of a level
// 2 identifier: upper case [A-Z0-9_], a file's extension after its last dot
// (at most 8 characters), name and extension at most 30 characters together
// (directories: 31, no extension).
func isoName(s string, isDir bool) (name, ext string) {
	if !isDir {
		if i := strings.LastIndexByte(s, '.'); i >= 0 {
			s, ext = s[:i], dChars(s[i+1:], 8)
		}
		name = dChars(s, 30-len(ext))
	} else {
		name = dChars(s, 31)
	}
	if name == "" {
		name = "_"
	}
	return name, ext
}

// dChars maps s to at most limit d-characters.
func dChars(s string, limit int) string {
	b := make([]byte, 0, min(len(s), limit))
	for _, r := range s {
		if len(b) == limit {
			break
		}
		switch {
		case r >= 'a' && r <= 'z':
			b = append(b, byte(r-'a'+'A'))
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b = append(b, byte(r))
		default:
			b = append(b, '_')
		}
	}
	return string(b)
}

// write serializes everything but the file data.
func (l *layout) write() *Image {
	dataStart := l.ceFirst + l.ceBlocks
	head := make([]byte, int(dataStart)*BlockSize)
	root := l.dirs[0]
	var stamp [7]byte
	t := l.t
	stamp[0] = byte(t.Year() - 1900)
	stamp[1], stamp[2] = byte(t.Month()), byte(t.Day())
	stamp[3], stamp[4], stamp[5] = byte(t.Hour()), byte(t.Minute()), byte(t.Second())
	// stamp[6]: offset from GMT in 15-minute units, 0

	// Primary volume descriptor (ECMA-119 8.4).
	pvd := head[16*BlockSize : 17*BlockSize]
	pvd[0] = 1
	copy(pvd[1:6], "CD001")
	pvd[6] = 1
	padded(pvd[8:40], systemID)
	padded(pvd[40:72], l.opts.VolumeID)
	both32(pvd[80:], l.blocks)
	both16(pvd[120:], 1) // volume set size
	both16(pvd[124:], 1) // volume sequence number
	both16(pvd[128:], BlockSize)
	both32(pvd[132:], uint32(l.ptSize))
	binary.LittleEndian.PutUint32(pvd[140:], l.lPT)
	binary.BigEndian.PutUint32(pvd[148:], l.mPT)
	rr := pvd[156:190]
	rr[0] = 34
	both32(rr[2:], root.extent)
	both32(rr[10:], root.size)
	copy(rr[18:25], stamp[:])
	rr[25] = 2
	both16(rr[28:], 1)
	rr[32] = 1 // identifier 0x00
	padded(pvd[190:318], "")
	padded(pvd[318:446], l.opts.Publisher)
	padded(pvd[446:574], "")
	padded(pvd[574:702], applicationID)
	padded(pvd[702:813], "") // copyright, abstract, bibliographic file ids
	date := []byte(fmt.Sprintf("%04d%02d%02d%02d%02d%02d00", t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second()))
	copy(pvd[813:], date) // creation
	copy(pvd[830:], date) // modification
	copy(pvd[847:], "0000000000000000")
	copy(pvd[864:], "0000000000000000") // expiration and effective: not specified
	pvd[881] = 1                        // file structure version

	term := head[17*BlockSize:]
	term[0] = 255
	copy(term[1:6], "CD001")
	term[6] = 1

	// Path tables (ECMA-119 9.4).
	lp := head[int(l.lPT)*BlockSize:]
	mp := head[int(l.mPT)*BlockSize:]
	off := 0
	for _, d := range l.dirs {
		id := d.pathTableID()
		parent := uint16(1)
		if d.parent != nil {
			parent = d.parent.num
		}
		lp[off], mp[off] = byte(len(id)), byte(len(id))
		binary.LittleEndian.PutUint32(lp[off+2:], d.extent)
		binary.BigEndian.PutUint32(mp[off+2:], d.extent)
		binary.LittleEndian.PutUint16(lp[off+6:], parent)
		binary.BigEndian.PutUint16(mp[off+6:], parent)
		copy(lp[off+8:], id)
		copy(mp[off+8:], id)
		off += 8 + len(id) + len(id)%2
	}

	// Continuation areas.
	ce := head[int(l.rootCE[0])*BlockSize+int(l.rootCE[1]):]
	ce[0], ce[1], ce[2], ce[3] = 'E', 'R', byte(lenER), 1
	ce[4], ce[5], ce[6], ce[7] = byte(len(erID)), byte(len(erDescriptor)), byte(len(erSource)), 1
	copy(ce[8:], erID+erDescriptor+erSource)

	// Directories.
	for _, d := range l.dirs {
		start := int(d.extent) * BlockSize
		b := head[start : start+int(d.size)]
		off := 0
		put := func(n *node, length int, kind int) {
			if off%BlockSize+length > BlockSize {
				off += BlockSize - off%BlockSize
			}
			l.record(b[off:off+length], n, kind, stamp)
			off += length
		}
		put(d, selfLen(d == root), self)
		parent := d.parent
		if parent == nil {
			parent = d
		}
		put(parent, selfLen(false), dotdot)
		for _, k := range d.kids {
			put(k, k.recLen, child)
			if k.nmInCE {
				putNM(head[int(k.ceBlock)*BlockSize+int(k.ceOff):], k.name)
			}
		}
	}
	return &Image{head: head, files: l.files, size: int64(l.blocks) * BlockSize}
}

const (
	child = iota
	self
	dotdot
)

// record writes the directory record of n into b, which has exactly the
// record's length and is zeroed.
func (l *layout) record(b []byte, n *node, kind int, stamp [7]byte) {
	b[0] = byte(len(b))
	both32(b[2:], n.extent)
	both32(b[10:], n.size)
	copy(b[18:25], stamp[:])
	if n.isDir {
		b[25] = 2
	}
	both16(b[28:], 1)
	var i int
	switch kind {
	case self:
		b[32], b[33], i = 1, 0, 34
	case dotdot:
		b[32], b[33], i = 1, 1, 34
	default:
		b[32] = byte(len(n.id))
		copy(b[33:], n.id)
		i = 33 + len(n.id) + 1 - len(n.id)%2
	}
	isRootSelf := kind == self && n.parent == nil
	if isRootSelf {
		copy(b[i:], []byte{'S', 'P', lenSP, 1, 0xbe, 0xef, 0})
		i += lenSP
	}
	flags := byte(rrPX | rrTF)
	if kind == child {
		flags |= rrNM
	}
	copy(b[i:], []byte{'R', 'R', lenRR, 1, flags})
	i += lenRR
	if kind == child && !n.nmInCE {
		i += putNM(b[i:], n.name)
	}
	mode, nlink := uint32(modeFile), uint32(1)
	if n.isDir {
		mode, nlink = modeDir, uint32(2+n.nsub)
	}
	px := b[i : i+lenPX]
	px[0], px[1], px[2], px[3] = 'P', 'X', lenPX, 1
	both32(px[4:], mode)
	both32(px[12:], nlink)
	// uid (px[20:28]) and gid (px[28:36]) 0
	i += lenPX
	tf := b[i : i+lenTF]
	tf[0], tf[1], tf[2], tf[3], tf[4] = 'T', 'F', lenTF, 1, 0x0e // modify, access, attributes
	copy(tf[5:], stamp[:])
	copy(tf[12:], stamp[:])
	copy(tf[19:], stamp[:])
	i += lenTF
	switch {
	case isRootSelf:
		putCE(b[i:], l.rootCE[0], l.rootCE[1], uint32(lenER))
	case kind == child && n.nmInCE:
		putCE(b[i:], n.ceBlock, n.ceOff, uint32(lenNM+len(n.name)))
	}
}

func putNM(b []byte, name string) int {
	n := lenNM + len(name)
	b[0], b[1], b[2], b[3], b[4] = 'N', 'M', byte(n), 1, 0
	copy(b[5:], name)
	return n
}

func putCE(b []byte, block, off, n uint32) {
	b[0], b[1], b[2], b[3] = 'C', 'E', lenCE, 1
	both32(b[4:], block)
	both32(b[12:], off)
	both32(b[20:], n)
}

func padded(b []byte, s string) {
	n := copy(b, s)
	for i := n; i < len(b); i++ {
		b[i] = ' '
	}
}

func both16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b, v)
	binary.BigEndian.PutUint16(b[2:], v)
}

func both32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b, v)
	binary.BigEndian.PutUint32(b[4:], v)
}

var zeros [BlockSize]byte

// WriteTo writes the image to w: the metadata blocks, then every file's
// data padded to whole blocks. Small writes are coalesced; large file data
// goes to w directly. It returns the number of bytes written, Size() on
// success.
func (im *Image) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	write := func(b []byte) error {
		_, err := bw.Write(b)
		return err
	}
	err := write(im.head)
	for _, f := range im.files {
		if err != nil {
			break
		}
		if err = write(f.data); err == nil && len(f.data)%BlockSize != 0 {
			err = write(zeros[:BlockSize-len(f.data)%BlockSize])
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && cw.n != im.size {
		err = fmt.Errorf("isowriter: wrote %d bytes, want %d", cw.n, im.size)
	}
	return cw.n, err
}

// Bytes returns the whole image.
func (im *Image) Bytes() []byte {
	b := make([]byte, im.size)
	off := copy(b, im.head)
	for _, f := range im.files {
		copy(b[off:], f.data)
		off += int(blocksFor(int64(len(f.data)))) * BlockSize
	}
	return b
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
