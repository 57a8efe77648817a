package controller

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

// The fake disk maker of the unit tests and the fault matrices (issue 22,
// item 9). A fault step applies a spec of four disks, each a `qemu-img
// create` process (about 8 ms of CPU, and a fork of the race-detecting
// test binary): a third of a matrix's CPU went there. goImages writes,
// in Go, the bytes qemu-img 7.2 writes for a blank qcow2 or an overlay
// (TestGoImagesMatchQemuImg compares them byte for byte), so whatever
// reads the disks afterwards — the real qemu-img's info, resize and
// convert, the fake LUKS, a snapshot's header digest — sees the same
// image. Lookup is the real catalog's (an imported image is found by its
// sidecar, without a process).
//
// The real `qemu-img create` keeps its paths: TestImageBackedDisk and
// TestGoImagesMatchQemuImg here, and every libvirt_*_test.go over the
// real libvirtd (realEnv keeps the real disk maker).

// goImages is the controller's disk maker writing qcow2 images in Go.
// With fail set, Create fails as a dying qemu-img may: after writing
// part of the new image (never the backing file).
type goImages struct {
	Images      // the real catalog: Lookup
	fail   bool // Create fails after a partial file
}

func (g goImages) Create(ctx context.Context, d images.Disk) error {
	if g.fail {
		if err := os.WriteFile(d.Path, []byte("partial\n"), 0o644); err != nil {
			return err
		}
		return fmt.Errorf("qemu-img create %s: %w", d.Path, errInjected)
	}
	b, err := qcow2Image(d)
	if err != nil {
		return fmt.Errorf("qemu-img create %s: %w", d.Path, err)
	}
	if err := writeSparse(d.Path, b, 0o644); err != nil {
		return fmt.Errorf("qemu-img create %s: %w", d.Path, err)
	}
	return nil
}

// writeSparse writes b to the file at path (created or truncated, as
// qemu-img create does), skipping its 4 KiB blocks of zeros: an image of
// four 64 KiB clusters holds a few hundred bytes that are not zeros.
func writeSparse(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	defer f.Close()
	var zero [4096]byte
	for off := 0; off < len(b); off += len(zero) {
		if blk := b[off:min(off+len(zero), len(b))]; !bytes.Equal(blk, zero[:len(blk)]) {
			if _, err := f.WriteAt(blk, int64(off)); err != nil {
				return err
			}
		}
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		return err
	}
	return f.Close()
}

// useGoImages puts e's disk maker on goImages.
func (e *env) useGoImages() { e.dp().Images = goImages{Images: e.dp().Catalog} }

// qcow2 layout of qemu-img 7.2's `create -f qcow2` (64 KiB clusters,
// 16-bit refcounts, version 3): the header and its extensions (backing
// format, feature names, end) and the backing file's name in cluster 0,
// the refcount table in cluster 1, its one block in cluster 2, the L1
// table in cluster 3.
const (
	qcow2Cluster      = 1 << 16
	qcow2HeaderLength = 112
	qcow2L1Covers     = qcow2Cluster * (qcow2Cluster / 8) // bytes an L1 entry maps
)

// qcow2FeatureNames is the feature name table qemu-img writes.
var qcow2FeatureNames = []struct {
	kind, bit byte
	name      string
}{
	{0, 0, "dirty bit"}, {0, 1, "corrupt bit"}, {0, 2, "external data file"}, {0, 3, "compression type"},
	{0, 4, "extended L2 entries"}, {1, 0, "lazy refcounts"}, {2, 0, "bitmaps"}, {2, 1, "raw external data"},
}

// qcow2Image is the file `qemu-img create -f qcow2 [-b base -F format]
// path [size]` writes: the size is d.Size, else the base's virtual size.
func qcow2Image(d images.Disk) ([]byte, error) {
	var size int64
	if d.Size != "" {
		n, err := model.ParseDiskSize(d.Size)
		if err != nil {
			return nil, fmt.Errorf("size %q: %w", d.Size, err)
		}
		size = n
	}
	if d.Base != nil {
		n, err := virtualSize(d.Base.Path, d.Base.Format)
		if err != nil {
			return nil, fmt.Errorf("could not open backing file %s: %w", d.Base.Path, err)
		}
		if d.Size == "" {
			size = n
		}
	} else if d.Size == "" {
		return nil, errors.New("size must be specified")
	}
	size = (size + 511) &^ 511 // whole sectors
	l1 := (size + qcow2L1Covers - 1) / qcow2L1Covers

	img := make([]byte, 3*qcow2Cluster+8*l1)
	be := binary.BigEndian
	h := img[:qcow2Cluster]
	copy(h, "QFI\xfb")
	be.PutUint32(h[4:], 3)   // version
	be.PutUint32(h[20:], 16) // cluster_bits
	be.PutUint64(h[24:], uint64(size))
	be.PutUint32(h[36:], uint32(l1))
	be.PutUint64(h[40:], 3*qcow2Cluster) // L1 table
	be.PutUint64(h[48:], qcow2Cluster)   // refcount table
	be.PutUint32(h[56:], 1)              // its clusters
	be.PutUint32(h[96:], 4)              // refcount_order: 16 bits
	be.PutUint32(h[100:], qcow2HeaderLength)
	off := qcow2HeaderLength
	ext := func(kind uint32, data []byte) {
		be.PutUint32(h[off:], kind)
		be.PutUint32(h[off+4:], uint32(len(data)))
		copy(h[off+8:], data)
		off += 8 + (len(data)+7)&^7
	}
	if d.Base != nil {
		ext(0xe2792aca, []byte(d.Base.Format))
	}
	names := make([]byte, 48*len(qcow2FeatureNames))
	for i, f := range qcow2FeatureNames {
		names[48*i], names[48*i+1] = f.kind, f.bit
		copy(names[48*i+2:48*i+48], f.name)
	}
	ext(0x6803f857, names)
	ext(0, nil)
	if d.Base != nil {
		if off+len(d.Base.Path) > qcow2Cluster {
			return nil, fmt.Errorf("backing file name %q too long", d.Base.Path)
		}
		be.PutUint64(h[8:], uint64(off))
		be.PutUint32(h[16:], uint32(len(d.Base.Path)))
		copy(h[off:], d.Base.Path)
	}
	be.PutUint64(img[qcow2Cluster:], 2*qcow2Cluster) // refcount block
	for i := range 4 {                               // clusters 0-3 in use once
		be.PutUint16(img[2*qcow2Cluster+2*i:], 1)
	}
	return img, nil
}

// virtualSize is the size a guest sees of the image at p in format
// (qcow2, raw, or "": found out): a qcow2's header says it (a fake LUKS
// disk's its text, fakedisk_test.go), a raw file is its size.
func virtualSize(p, format string) (int64, error) {
	if fd, fake, err := readFakeDisk(p); err != nil {
		return 0, err
	} else if fake {
		return fd.size, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	head := make([]byte, 32)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, err
	}
	switch {
	case format != "raw" && n == len(head) && bytes.HasPrefix(head, []byte("QFI\xfb")):
		return int64(binary.BigEndian.Uint64(head[24:])), nil
	case format == "qcow2":
		return 0, fmt.Errorf("%s: not a qcow2 image", p)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// TestGoImagesMatchQemuImg: goImages writes what the real qemu-img
// create writes, byte for byte — blank images of several sizes, overlays
// of a qcow2 and of a raw base, with and without a size — and fails as
// it does without a size or a base file.
func TestGoImagesMatchQemuImg(t *testing.T) {
	t.Parallel()
	real := images.New(t.TempDir(), images.Options{QemuImg: testenv.LookPath(t, "qemu-img")})
	dir := t.TempDir()
	ctx := context.Background()
	raw := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(raw, make([]byte, 5<<20+3), 0o644); err != nil {
		t.Fatal(err)
	}
	qcow := filepath.Join(dir, strings.Repeat("long-name-", 20)+".qcow2")
	if err := real.Create(ctx, images.Disk{Path: qcow, Size: "24M"}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []images.Disk{
		{Size: "16M"}, {Size: "8M"}, {Size: "1000"}, {Size: "2G"}, {Size: "1T"},
		{Base: &images.Base{Path: qcow, Format: "qcow2"}},
		{Base: &images.Base{Path: qcow, Format: "qcow2"}, Size: "1G"},
		{Base: &images.Base{Path: raw, Format: "raw"}},
		{Base: &images.Base{Path: raw, Format: "raw"}, Size: "8M"},
	} {
		name := d.Size
		if d.Base != nil {
			name = d.Base.Format + "-overlay-" + d.Size
		}
		want, got := d, d
		want.Path, got.Path = filepath.Join(dir, "want.qcow2"), filepath.Join(dir, "got.qcow2")
		if err := real.Create(ctx, want); err != nil {
			t.Fatalf("%s: qemu-img: %v", name, err)
		}
		if err := (goImages{}).Create(ctx, got); err != nil {
			t.Fatalf("%s: goImages: %v", name, err)
		}
		w, _ := os.ReadFile(want.Path)
		g, _ := os.ReadFile(got.Path)
		if !bytes.Equal(w, g) {
			i := 0
			for i < min(len(w), len(g)) && w[i] == g[i] {
				i++
			}
			t.Errorf("%s: goImages wrote %d bytes, qemu-img %d; first difference at %#x", name, len(g), len(w), i)
		}
		os.Remove(want.Path)
		os.Remove(got.Path)
	}
	for _, d := range []images.Disk{{}, {Base: &images.Base{Path: filepath.Join(dir, "missing"), Format: "qcow2"}}} {
		d.Path = filepath.Join(dir, "bad.qcow2")
		if real.Create(ctx, d) == nil || (goImages{}).Create(ctx, d) == nil {
			t.Errorf("%+v: created", d)
		}
	}
	p := filepath.Join(dir, "partial.qcow2")
	if err := (goImages{fail: true}).Create(ctx, images.Disk{Path: p, Size: "1M"}); !errors.Is(err, errInjected) {
		t.Errorf("failing create: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Errorf("failing create left no partial file: %v", err)
	}
}

// patternImage caches plainPatternImage's bytes for the test binary.
var patternImage struct {
	sync.Mutex
	b []byte
}

// plainPatternImage is a plain 16 MiB qcow2 that holds imagePattern in
// its first 64 KiB, made once per test binary by the real qemu-img and
// qemu-io (a fault matrix's setup imports one per step).
func plainPatternImage(t *testing.T) []byte {
	t.Helper()
	patternImage.Lock()
	defer patternImage.Unlock()
	if patternImage.b == nil {
		p := filepath.Join(t.TempDir(), "plain.qcow2")
		if err := images.New(filepath.Dir(p), images.Options{QemuImg: testenv.LookPath(t, "qemu-img")}).Create(context.Background(), images.Disk{Path: p, Size: "16M"}); err != nil {
			t.Fatal(err)
		}
		writePattern(t, p, nil)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		patternImage.b = b
	}
	return patternImage.b
}

// goTemplates caches, per template, what images.Templates made with the
// real mkfs or mkswap: its size and its blocks that are not zeros.
var goTemplates struct {
	sync.Mutex
	m map[string]goTemplate
}

type goTemplate struct {
	name   string
	size   int64
	blocks map[int64][]byte // by offset, 4 KiB each
}

// makeTemplate puts into e's template cache (instances/_base) the
// blank-disk template of kind and size images.Templates would make there:
// the same name and bytes (a sparse file), copied from one the real mkfs
// or mkswap made once per test binary. A flavor fault matrix makes its
// templates in every step; TestFlavorLibvirt makes them with the real
// tools through the controller.
func makeTemplate(t *testing.T, e *env, kind string, size int) {
	t.Helper()
	key := fmt.Sprintf("%s/%d", kind, size)
	goTemplates.Lock()
	tpl, ok := goTemplates.m[key]
	if !ok {
		dir := t.TempDir()
		base, err := images.New(dir, images.Options{}).NewTemplates(dir).Template(context.Background(), kind, size)
		if err != nil {
			goTemplates.Unlock()
			t.Fatal(err)
		}
		b, err := os.ReadFile(base.Path)
		if err != nil {
			goTemplates.Unlock()
			t.Fatal(err)
		}
		tpl = goTemplate{name: filepath.Base(base.Path), size: int64(len(b)), blocks: map[int64][]byte{}}
		zero := make([]byte, 4096)
		for off := 0; off < len(b); off += 4096 {
			if blk := b[off:min(off+4096, len(b))]; !bytes.Equal(blk, zero[:len(blk)]) {
				tpl.blocks[int64(off)] = bytes.Clone(blk)
			}
		}
		if goTemplates.m == nil {
			goTemplates.m = map[string]goTemplate{}
		}
		goTemplates.m[key] = tpl
	}
	goTemplates.Unlock()
	dir := filepath.Join(e.dir, "instances", "_base")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, tpl.name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(tpl.size); err != nil {
		t.Fatal(err)
	}
	for off, blk := range tpl.blocks {
		if _, err := f.WriteAt(blk, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMakeTemplateMatchesMkswap: makeTemplate writes the template the
// real images.Templates makes, under the same name and byte for byte but
// for the swap header's UUID (mkswap makes a new one each time), and a
// snapshot shows it as a template.
func TestMakeTemplateMatchesMkswap(t *testing.T) {
	t.Parallel()
	testenv.LookPath(t, "mkswap")
	e := &env{t: t, dir: t.TempDir()}
	makeTemplate(t, e, images.TemplateSwap, 16)
	dir := filepath.Join(t.TempDir(), "_base")
	real, err := images.New(dir, images.Options{}).NewTemplates(dir).Template(context.Background(), images.TemplateSwap, 16)
	if err != nil {
		t.Fatal(err)
	}
	got := filepath.Join(e.dir, "instances", "_base", filepath.Base(real.Path))
	a, err := os.ReadFile(real.Path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	const uuidAt = 1024 + 12 // struct swap_header_v1_2: bootbits, version, last_page, nr_badpages, uuid
	if len(a) != len(b) || len(a) < uuidAt+16 {
		t.Fatalf("makeTemplate wrote %d bytes, mkswap's template is %d", len(b), len(a))
	}
	clear(a[uuidAt : uuidAt+16])
	clear(b[uuidAt : uuidAt+16])
	if !bytes.Equal(a, b) || !bytes.Contains(a[:4096], []byte("SWAPSPACE2")) {
		t.Error("makeTemplate's template differs from mkswap's beyond the UUID")
	}
	if d, err := fileDigest(got); err != nil || !strings.HasPrefix(d, "template size=16777216 head=") {
		t.Errorf("snapshot shows makeTemplate's template as %q (%v)", d, err)
	}
}

// qcow2Listing is what a guest sees of the plain qcow2 at p, read from
// its header and tables in Go: its virtual size, its backing file, and
// which of its clusters the image itself holds (data or zeros), as
// `qemu-img info` and `qemu-img map` tell it without the host offsets. A
// disk grown by a resize and shrunk back by its undo lists the same (its
// bytes differ: qcow2 keeps the larger L1 table). ok is false for
// anything else.
func qcow2Listing(p string) (string, bool) {
	f, err := os.Open(p)
	if err != nil {
		return "", false
	}
	defer f.Close()
	h := make([]byte, qcow2HeaderBytes)
	if n, err := io.ReadFull(f, h); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", false
	} else if !isPlainQcow2Header(h[:n]) || binary.BigEndian.Uint32(h[20:]) != 16 {
		return "", false
	}
	be := binary.BigEndian
	size := be.Uint64(h[24:])
	boff, blen := be.Uint64(h[8:]), uint64(be.Uint32(h[16:]))
	backing := string(h[boff : boff+blen])
	l1 := make([]byte, 8*be.Uint32(h[36:]))
	if _, err := f.ReadAt(l1, int64(be.Uint64(h[40:]))); err != nil {
		return "", false
	}
	const offsetMask = 0x00fffffffffffe00
	var held []string
	l2 := make([]byte, qcow2Cluster)
	for i := range len(l1) / 8 {
		t := be.Uint64(l1[8*i:]) & offsetMask
		if t == 0 {
			continue
		}
		if _, err := f.ReadAt(l2, int64(t)); err != nil {
			return "", false
		}
		for j := range qcow2Cluster / 8 {
			if e := be.Uint64(l2[8*j:]) &^ (1 << 63); e != 0 {
				kind := "data"
				if e&1 != 0 {
					kind = "zero"
				}
				held = append(held, fmt.Sprintf("%d:%s", i*qcow2Cluster/8+j, kind))
			}
		}
	}
	return fmt.Sprintf("qcow2 %d over %q, clusters [%s]", size, backing, strings.Join(held, " ")), true
}

// TestQcow2Listing: qcow2Listing sees a resize, a written cluster and
// another backing file, and not a grow shrunk back.
func TestQcow2Listing(t *testing.T) {
	t.Parallel()
	qemuImg := testenv.LookPath(t, "qemu-img")
	run := func(args ...string) {
		t.Helper()
		if out, err := execCommand(qemuImg, args...); err != nil {
			t.Fatalf("qemu-img %v: %v: %s", args, err, out)
		}
	}
	dir := t.TempDir()
	base, base2, p := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "base2.qcow2"), filepath.Join(dir, "disk")
	run("create", "-q", "-f", "qcow2", base, "1G")
	run("create", "-q", "-f", "qcow2", base2, "1G")
	run("create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", p)
	listing := func() string {
		t.Helper()
		v, ok := qcow2Listing(p)
		if !ok {
			t.Fatalf("%s: not listed", p)
		}
		return v
	}
	blank := listing()
	if want := fmt.Sprintf("qcow2 %d over %q, clusters []", 1<<30, base); blank != want {
		t.Errorf("blank overlay: %s, want %s", blank, want)
	}
	run("resize", "-q", "-f", "qcow2", p, "2G")
	if listing() == blank {
		t.Error("a resize does not show")
	}
	run("resize", "-q", "--shrink", "-f", "qcow2", p, "1G")
	if v := listing(); v != blank {
		t.Errorf("grown and shrunk back: %s, want %s", v, blank)
	}
	testenv.LookPath(t, "qemu-io")
	if out, err := execCommand(testenv.LookPath(t, "qemu-io"), "-f", "qcow2", p, "-c", "write -P 0x5a 128k 64k", "-c", "write -z 1M 64k"); err != nil {
		t.Fatalf("qemu-io: %v: %s", err, out)
	}
	if v := listing(); !strings.HasSuffix(v, "clusters [2:data 16:zero]") {
		t.Errorf("after writing cluster 2 and zeroing cluster 16: %s", v)
	}
	os.Remove(p)
	run("create", "-q", "-f", "qcow2", "-b", base2, "-F", "qcow2", p)
	if v := listing(); v == blank {
		t.Error("another backing file does not show")
	}
	if _, ok := qcow2Listing(base + ".missing"); ok {
		t.Error("a missing file listed")
	}
}

// TestEnvMakesDisksInGo: newEnv's disks part makes its disks with
// goImages (no qemu-img process), and failQemuImgCreate makes an apply
// fail there, leaving nothing behind.
func TestEnvMakesDisksInGo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, ok := e.dp().Images.(goImages); !ok {
		t.Fatalf("the disks part makes disks with %T", e.dp().Images)
	}
	before := e.snapshot()
	e.failQemuImgCreate()
	if _, err := e.apply(hvSpec); !errors.Is(err, errInjected) {
		t.Fatalf("apply with a failing disk maker: %v", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("the failed apply left:\n%s", diffLines(before, after))
	}
}
