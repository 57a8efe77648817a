package isowriter_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/configdrive/internal/isowriter"
	"github.com/vmeta/vmeta/internal/metadata"
)

var fixed = time.Date(2025, 4, 4, 12, 34, 56, 0, time.UTC)

func opts() isowriter.Options {
	return isowriter.Options{VolumeID: "config-2", Publisher: "vmeta", Time: fixed}
}

func image(t testing.TB, files []metadata.File) []byte {
	t.Helper()
	im, err := isowriter.New(files, opts())
	if err != nil {
		t.Fatal(err)
	}
	b := im.Bytes()
	if int64(len(b)) != im.Size() {
		t.Fatalf("Bytes: %d bytes, Size %d", len(b), im.Size())
	}
	return b
}

// smallTree is a miniature config drive.
func smallTree() []metadata.File {
	return []metadata.File{
		{Path: "ec2/latest/meta-data.json", Data: []byte(`{"instance-id":"i-1"}`)},
		{Path: "openstack/content/0000", Data: []byte{}},
		{Path: "openstack/latest/meta_data.json", Data: []byte(`{"uuid":"x"}`)},
		{Path: "openstack/latest/user_data", Data: bytes.Repeat([]byte("#cloud-config\n"), 200)},
	}
}

// TestGolden pins the exact image of a small tree at a fixed time: the
// writer is deterministic, and a change of layout shows up here.
func TestGolden(t *testing.T) {
	b := image(t, smallTree())
	sum := sha256.Sum256(b)
	const (
		wantSize = 31 * isowriter.BlockSize
		wantSum  = "84183726f91595e18311f03db42949789fbc413c8347ef6709cc73c9f7fc6918"
	)
	if len(b) != wantSize || hex.EncodeToString(sum[:]) != wantSum {
		t.Errorf("image: %d bytes, sha256 %x; want %d bytes, %s", len(b), sum, wantSize, wantSum)
	}
	check(t, b, smallTree())
}

// TestDeterministic: the input order does not matter, and WriteTo writes
// what Bytes returns.
func TestDeterministic(t *testing.T) {
	files := randomTree(rand.New(rand.NewPCG(7, 8)), 300)
	want := image(t, files)
	rng := rand.New(rand.NewPCG(9, 10))
	for range 3 {
		shuffled := slices.Clone(files)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := image(t, shuffled); !bytes.Equal(got, want) {
			t.Fatal("image depends on the order of the files")
		}
	}
	im, err := isowriter.New(files, opts())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := im.WriteTo(&buf)
	if err != nil || n != im.Size() || !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("WriteTo: %d bytes, %v; differs from Bytes: %v", n, err, !bytes.Equal(buf.Bytes(), want))
	}
	// A time outside what a directory record holds.
	o := opts()
	o.Time = time.Date(1899, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := isowriter.New(files, o); err == nil {
		t.Error("New accepted a time before 1900")
	}
}

type failWriter struct{ left int }

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		n := w.left
		w.left = 0
		return n, errors.New("disk full")
	}
	w.left -= len(p)
	return len(p), nil
}

func TestWriteToError(t *testing.T) {
	im, err := isowriter.New(smallTree(), opts())
	if err != nil {
		t.Fatal(err)
	}
	n, err := im.WriteTo(&failWriter{left: 40000})
	if err == nil || n != 40000 {
		t.Errorf("WriteTo = %d, %v; want 40000 and an error", n, err)
	}
}

func TestStructure(t *testing.T) {
	t.Run("small", func(t *testing.T) { check(t, image(t, smallTree()), smallTree()) })
	t.Run("clashes", func(t *testing.T) {
		var files []metadata.File
		// Names that map to the same ISO 9660 identifier, and names that
		// look like the numbered replacements.
		for _, n := range []string{"a-b", "a_b", "A_B", "a b", "A_B000", "a_b001", "ab.json", "AB.JSON", "ab.JSON",
			"x.tar.gz", "x_tar.gz", "d", "d.", "ünï", "___", "0", "00", strings.Repeat("q", 40), strings.Repeat("q", 41),
			strings.Repeat("q", 30) + ".json", strings.Repeat("q", 31) + ".json", "f.verylongextension", "f.verylongextensiom"} {
			files = append(files, metadata.File{Path: "c/" + n, Data: []byte(n)})
			files = append(files, metadata.File{Path: "dirs/" + n + "/f", Data: []byte(n)})
		}
		check(t, image(t, files), files)
	})
	t.Run("big directory", func(t *testing.T) {
		var files []metadata.File
		for i := range 200 {
			files = append(files, metadata.File{Path: fmt.Sprintf("big/file-%04d-with-a-longer-name.json", i), Data: []byte{byte(i)}})
		}
		b := image(t, files)
		dirs := check(t, b, files)
		if dirs["big"] < 4*isowriter.BlockSize {
			t.Errorf("big directory is %d bytes, want several blocks", dirs["big"])
		}
	})
	t.Run("long names", func(t *testing.T) {
		var files []metadata.File
		for n := 100; n <= isowriter.MaxNameLen; n += 10 {
			files = append(files, metadata.File{Path: "l/" + strings.Repeat("n", n), Data: []byte{1}})
			files = append(files, metadata.File{Path: "l/" + strings.Repeat("é", n/2), Data: []byte{2}})
		}
		files = append(files, metadata.File{Path: "l/" + strings.Repeat("m", isowriter.MaxNameLen), Data: nil})
		check(t, image(t, files), files)
	})
	t.Run("deep", func(t *testing.T) {
		var files []metadata.File
		p := ""
		for i := range isowriter.MaxDepth {
			files = append(files, metadata.File{Path: p + "file", Data: []byte(p)})
			p += fmt.Sprintf("level-%d-%s/", i, strings.Repeat("x", 30))
		}
		check(t, image(t, files), files)
	})
	t.Run("big files", func(t *testing.T) {
		files := []metadata.File{
			{Path: "a", Data: bytes.Repeat([]byte{1}, 3*isowriter.BlockSize)},
			{Path: "b", Data: bytes.Repeat([]byte{2}, 3*isowriter.BlockSize+1)},
			{Path: "c", Data: bytes.Repeat([]byte{3}, 100<<10)},
		}
		check(t, image(t, files), files)
	})
	for seed := range uint64(20) {
		t.Run(fmt.Sprintf("random-%d", seed), func(t *testing.T) {
			files := randomTree(rand.New(rand.NewPCG(seed, 1)), 1+int(seed)*15)
			check(t, image(t, files), files)
		})
	}
}

func TestErrors(t *testing.T) {
	for name, files := range map[string][]metadata.File{
		"none":          nil,
		"duplicate":     {{Path: "a/b"}, {Path: "a/b"}},
		"file is a dir": {{Path: "a/b"}, {Path: "a"}},
		"dir is a file": {{Path: "a"}, {Path: "a/b"}},
		"too deep":      {{Path: "1/2/3/4/5/6/7/8/9"}},
		"name too long": {{Path: "d/" + strings.Repeat("n", isowriter.MaxNameLen+1)}},
		"empty path":    {{Path: ""}},
		"empty name":    {{Path: "a//b"}},
		"dot":           {{Path: "a/./b"}},
	} {
		if _, err := isowriter.New(files, opts()); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := isowriter.New(smallTree(), isowriter.Options{VolumeID: strings.Repeat("v", 33)}); err == nil {
		t.Error("New accepted a 33-byte volume identifier")
	}
}

// randomTree makes n files in a random tree: short and long names, mixed
// case, Unicode, dots, depths up to MaxDepth, empty and multi-block files.
func randomTree(rng *rand.Rand, n int) []metadata.File {
	alphabet := []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_. ~éü✓")
	name := func() string {
		l := 1 + rng.IntN(12)
		switch rng.IntN(10) {
		case 0:
			l = 1 + rng.IntN(isowriter.MaxNameLen)
		case 1:
			l = 1 + rng.IntN(2)
		}
		var b strings.Builder
		for b.Len() < l {
			r := alphabet[rng.IntN(len(alphabet))]
			if b.Len()+len(string(r)) > l {
				break
			}
			b.WriteRune(r)
		}
		if s := b.String(); s != "" && s != "." && s != ".." {
			return s
		}
		return "x"
	}
	var dirs []string
	dirs = append(dirs, "")
	used := map[string]bool{}
	var files []metadata.File
	for len(files) < n {
		parent := dirs[rng.IntN(len(dirs))]
		p := parent + name()
		if used[p] || strings.Count(p, "/")+1 > isowriter.MaxDepth {
			continue
		}
		if rng.IntN(4) == 0 && strings.Count(p, "/")+2 <= isowriter.MaxDepth {
			used[p] = true
			dirs = append(dirs, p+"/")
			continue
		}
		used[p] = true
		var data []byte
		switch rng.IntN(5) {
		case 0:
		case 1:
			data = make([]byte, rng.IntN(3*isowriter.BlockSize))
		default:
			data = make([]byte, rng.IntN(300))
		}
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		files = append(files, metadata.File{Path: p, Data: data})
	}
	return files
}

// check parses img as an ISO 9660 image with Rock Ridge, independently of
// the writer, checking the structure rules the writer promises, and
// compares its files with want. It returns the size of every directory.
func check(t *testing.T, img []byte, want []metadata.File) map[string]int {
	t.Helper()
	const bs = isowriter.BlockSize
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format, args...)
	}
	if len(img)%bs != 0 || len(img) < 19*bs {
		fail("image is %d bytes", len(img))
	}
	if !bytes.Equal(img[:16*bs], make([]byte, 16*bs)) {
		fail("system area not zero")
	}
	pvd := img[16*bs : 17*bs]
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" || pvd[6] != 1 || pvd[881] != 1 {
		fail("bad primary volume descriptor header")
	}
	term := img[17*bs : 18*bs]
	if term[0] != 255 || string(term[1:6]) != "CD001" || term[6] != 1 {
		fail("no terminator at block 17")
	}
	le32 := func(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
	both32 := func(b []byte, what string) uint32 {
		t.Helper()
		if le32(b) != binary.BigEndian.Uint32(b[4:]) {
			fail("%s: both-endian halves differ", what)
		}
		return le32(b)
	}
	both16 := func(b []byte, what string) uint16 {
		t.Helper()
		if binary.LittleEndian.Uint16(b) != binary.BigEndian.Uint16(b[2:]) {
			fail("%s: both-endian halves differ", what)
		}
		return binary.LittleEndian.Uint16(b)
	}
	blocks := both32(pvd[80:], "volume space size")
	if int(blocks)*bs != len(img) {
		fail("volume space size %d blocks, image %d bytes", blocks, len(img))
	}
	if both16(pvd[128:], "block size") != bs || both16(pvd[120:], "set size") != 1 || both16(pvd[124:], "seq") != 1 {
		fail("bad block size or volume set")
	}
	if got := string(pvd[40:72]); got != fmt.Sprintf("%-32s", "config-2") {
		fail("volume id %q", got)
	}
	if got := string(pvd[8:40]); got != fmt.Sprintf("%-32s", "LINUX") {
		fail("system id %q", got)
	}
	if got := string(pvd[813:830]); got != "2025040412345600\x00" {
		fail("creation date %q", got)
	}
	if got := string(pvd[847:864]); got != "0000000000000000\x00" {
		fail("expiration date %q", got)
	}

	used := make([]string, blocks) // what each block holds
	claim := func(first, n uint32, what string) {
		t.Helper()
		if uint64(first)+uint64(n) > uint64(blocks) {
			fail("%s: blocks %d+%d beyond the volume (%d)", what, first, n, blocks)
		}
		for b := first; b < first+n; b++ {
			if used[b] != "" {
				fail("%s: block %d already holds %s", what, b, used[b])
			}
			used[b] = what
		}
	}
	claim(0, 18, "volume descriptors")

	// Path tables.
	ptSize := both32(pvd[132:], "path table size")
	lPT, mPT := le32(pvd[140:]), binary.BigEndian.Uint32(pvd[148:])
	ptBlocks := (ptSize + bs - 1) / bs
	claim(lPT, ptBlocks, "L path table")
	claim(mPT, ptBlocks, "M path table")
	type ptEntry struct {
		extent uint32
		parent uint16
		id     string
	}
	var pt []ptEntry
	lp, mp := img[int(lPT)*bs:][:ptSize], img[int(mPT)*bs:][:ptSize]
	for off := 0; off < int(ptSize); {
		n := int(lp[off])
		if n == 0 || mp[off] != lp[off] || off+8+n > int(ptSize) {
			fail("path table entry at %d: bad length", off)
		}
		e := ptEntry{le32(lp[off+2:]), binary.LittleEndian.Uint16(lp[off+6:]), string(lp[off+8 : off+8+n])}
		if e.extent != binary.BigEndian.Uint32(mp[off+2:]) || e.parent != binary.BigEndian.Uint16(mp[off+6:]) ||
			e.id != string(mp[off+8:off+8+n]) {
			fail("path table entry %d: L and M differ", len(pt)+1)
		}
		pt = append(pt, e)
		off += 8 + n + n%2
	}
	level := make([]int, len(pt)+1)
	for i, e := range pt {
		num := i + 1
		if num == 1 {
			if e.parent != 1 || e.id != "\x00" {
				fail("path table: first entry is not the root")
			}
			level[1] = 1
			continue
		}
		if int(e.parent) >= num {
			fail("path table entry %d: parent %d not before it", num, e.parent)
		}
		level[num] = level[e.parent] + 1
		prev := pt[i-1]
		if level[num] < level[num-1] ||
			(level[num] == level[num-1] && (e.parent < prev.parent || (e.parent == prev.parent && e.id <= prev.id))) {
			fail("path table entries %d and %d out of order (ECMA-119 9.4)", num-1, num)
		}
	}

	// Directories, from the root record in the PVD.
	root := pvd[156:190]
	if root[0] != 34 || root[32] != 1 || root[33] != 0 || root[25] != 2 {
		fail("bad root record in PVD")
	}
	got := map[string][]byte{}
	dirSizes := map[string]int{}
	type dirInfo struct {
		parentExtent uint32
		id           string
	}
	dirs := map[uint32]dirInfo{}
	fileID := regexp.MustCompile(`^([A-Z0-9_]+)\.([A-Z0-9_]*);1$`)
	dirID := regexp.MustCompile(`^[A-Z0-9_]{1,31}$`)
	var suspFound bool

	type susp struct {
		nm     string
		hasNM  bool
		mode   uint32
		nlink  uint32
		hasPX  bool
		hasTF  bool
		sp, er bool
	}
	var parseSU func(su []byte, s *susp, depth int, what string)
	parseSU = func(su []byte, s *susp, depth int, what string) {
		t.Helper()
		for i := 0; i+4 <= len(su); {
			sig, n := string(su[i:i+2]), int(su[i+2])
			if n < 4 || i+n > len(su) || su[i+3] != 1 {
				fail("%s: bad SUSP entry %q at %d", what, sig, i)
			}
			e := su[i : i+n]
			switch sig {
			case "SP":
				if n != 7 || e[4] != 0xbe || e[5] != 0xef || e[6] != 0 || i != 0 {
					fail("%s: bad SP", what)
				}
				s.sp = true
			case "ER":
				if string(e[8:8+int(e[4])]) != "RRIP_1991A" {
					fail("%s: ER %q", what, e[8:8+int(e[4])])
				}
				s.er = true
			case "RR":
			case "NM":
				if s.hasNM || e[4] != 0 {
					fail("%s: second NM entry, or NM flags %#x", what, e[4])
				}
				s.nm, s.hasNM = string(e[5:]), true
			case "PX":
				if n != 36 {
					fail("%s: PX length %d", what, n)
				}
				s.mode, s.nlink, s.hasPX = both32(e[4:], "PX mode"), both32(e[12:], "PX nlink"), true
				if both32(e[20:], "uid") != 0 || both32(e[28:], "gid") != 0 {
					fail("%s: uid/gid not 0", what)
				}
			case "TF":
				if n != 26 || e[4] != 0x0e || !bytes.Equal(e[5:12], []byte{125, 4, 4, 12, 34, 56, 0}) {
					fail("%s: TF % x", what, e)
				}
				s.hasTF = true
			case "CE":
				if n != 28 || len(su)-(i+n) > 1 || depth > 0 {
					fail("%s: CE must be the last entry of a record", what)
				}
				blk, off, l := both32(e[4:], "CE block"), both32(e[12:], "CE offset"), both32(e[20:], "CE length")
				if off+l > bs || blk >= blocks || (used[blk] != "" && used[blk] != "continuation") {
					fail("%s: CE area %d/%d/%d crosses a block or overlaps %s", what, blk, off, l, used[blk])
				}
				used[blk] = "continuation"
				parseSU(img[int(blk)*bs+int(off):][:l], s, depth+1, what+" (continuation)")
			default:
				fail("%s: unexpected SUSP entry %q", what, sig)
			}
			i += n
			if rest := su[i:]; len(rest) < 4 && !bytes.Equal(rest, make([]byte, len(rest))) {
				fail("%s: System Use field ends in % x", what, rest)
			}
		}
	}

	var walk func(p, id string, extent, size uint32, parentExtent uint32, depth int)
	walk = func(p, id string, extent, size, parentExtent uint32, depth int) {
		t.Helper()
		if depth > isowriter.MaxDepth {
			fail("%s: too deep", p)
		}
		if size%bs != 0 || size == 0 {
			fail("%s: directory size %d", p, size)
		}
		dirSizes[p] = int(size)
		dirs[extent] = dirInfo{parentExtent, id}
		claim(extent, size/bs, "directory "+p)
		dir := img[int(extent)*bs:][:size]
		var prevName, prevExt string
		seen := map[string]bool{}
		var subdirs []func()
		nsub := 0
		var selfNlink uint32
		for off, idx := 0, 0; off < len(dir); idx++ {
			n := int(dir[off])
			if n == 0 {
				// The rest of the block must be empty.
				next := (off/bs + 1) * bs
				if !bytes.Equal(dir[off:next], make([]byte, next-off)) {
					fail("%s: junk after the last record of block", p)
				}
				off = next
				idx--
				continue
			}
			what := fmt.Sprintf("%s record %d", p, idx)
			if n < 34 || n%2 != 0 || off/bs != (off+n-1)/bs {
				fail("%s: length %d at %d (odd, short or crossing a block)", what, n, off)
			}
			r := dir[off : off+n]
			off += n
			idLen := int(r[32])
			id := string(r[33 : 33+idLen])
			suStart := 33 + idLen + 1 - idLen%2
			var s susp
			parseSU(r[suStart:], &s, 0, what)
			if !s.hasPX || !s.hasTF {
				fail("%s: PX or TF missing", what)
			}
			ext, sz := both32(r[2:], "extent"), both32(r[10:], "size")
			isDir := r[25]&2 != 0
			if isDir != (s.mode == 0o40555) || (!isDir && s.mode != 0o100444) {
				fail("%s: mode %o, directory flag %v", what, s.mode, isDir)
			}
			if !bytes.Equal(r[18:25], []byte{125, 4, 4, 12, 34, 56, 0}) {
				fail("%s: recording date % x", what, r[18:25])
			}
			switch idx {
			case 0:
				if id != "\x00" || ext != extent || sz != size {
					fail("%s: first record is not '.'", what)
				}
				if p == "" {
					if !s.sp || !s.er {
						fail("root '.': SP or ER missing")
					}
					suspFound = true
				}
				selfNlink = s.nlink
			case 1:
				if id != "\x01" || ext != parentExtent {
					fail("%s: second record is not '..'", what)
				}
			default:
				if !s.hasNM || s.sp || s.er {
					fail("%s: NM missing, or SP/ER outside the root", what)
				}
				if seen[id] {
					fail("%s (%q): duplicate identifier %q", what, s.nm, id)
				}
				seen[id] = true
				name, ext2 := id, ""
				if isDir {
					if !dirID.MatchString(id) {
						fail("%s: bad directory identifier %q", what, id)
					}
				} else {
					m := fileID.FindStringSubmatch(id)
					if m == nil || len(m[1])+len(m[2]) > 30 {
						fail("%s: bad file identifier %q", what, id)
					}
					name, ext2 = m[1], m[2]
				}
				if idx > 2 && (name < prevName || (name == prevName && ext2 < prevExt)) {
					fail("%s: %q sorts before %q.%q (ECMA-119 9.3)", what, id, prevName, prevExt)
				}
				prevName, prevExt = name, ext2
				cp := path.Join(p, s.nm)
				if isDir {
					nsub++
					if s.nlink < 2 {
						fail("%s: nlink %d", what, s.nlink)
					}
					subdirs = append(subdirs, func() { walk(cp, id, ext, sz, extent, depth+1) })
					continue
				}
				if s.nlink != 1 {
					fail("%s: nlink %d", what, s.nlink)
				}
				if sz == 0 {
					got[cp] = []byte{}
					continue
				}
				claim(ext, (sz+bs-1)/bs, "file "+cp)
				data := img[int(ext)*bs:]
				got[cp] = data[:sz]
				if pad := data[sz : (sz+bs-1)/bs*bs]; !bytes.Equal(pad, make([]byte, len(pad))) {
					fail("%s: padding not zero", cp)
				}
			}
		}
		if selfNlink != uint32(2+nsub) {
			fail("%s: nlink %d with %d subdirectories", p, selfNlink, nsub)
		}
		for _, f := range subdirs {
			f()
		}
	}
	rootExtent := both32(root[2:], "root extent")
	walk("", "\x00", rootExtent, both32(root[10:], "root size"), rootExtent, 1)
	if !suspFound {
		fail("no SUSP")
	}
	// The path table lists exactly the directories, with their parents.
	for i, e := range pt {
		d, ok := dirs[e.extent]
		if !ok || d.id != e.id || pt[e.parent-1].extent != d.parentExtent {
			fail("path table entry %d (%q at %d, parent %d) does not match the directory tree", i+1, e.id, e.extent, e.parent)
		}
	}
	if len(pt) != len(dirs) {
		fail("path table has %d entries, tree %d directories", len(pt), len(dirs))
	}
	for b, u := range used {
		if u == "" {
			fail("block %d unused: the image is not minimal", b)
		}
	}

	// Contents.
	wantM := map[string][]byte{}
	for _, f := range want {
		wantM[f.Path] = f.Data
	}
	for p, d := range wantM {
		g, ok := got[p]
		if !ok {
			fail("missing %s (have %d files)", p, len(got))
		}
		if !bytes.Equal(g, d) {
			fail("%s: contents differ", p)
		}
	}
	if len(got) != len(wantM) {
		fail("%d files, want %d", len(got), len(wantM))
	}
	return dirSizes
}
