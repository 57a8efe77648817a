package controller

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

// The fake disk layer of the fault matrices (issue 22, item 9): a real
// LUKS qcow2 costs qemu-img two PBKDF benchmarks (about 2 s of CPU each
// create or convert, whatever the iteration time), and a matrix makes
// hundreds. The matrices test the controller's undo logic, so here an
// encrypted disk is a small text file (fakeLUKSMagic, then its virtual
// size, the digest of its passphrase, its data's identity and its backing
// file) and:
//   - fakeLUKS makes, opens, resizes and converts such files in Go (the
//     controller's LUKS interface);
//   - fakeQemuImgScript is a qemu-img whose `info` answers for them as
//     the real one does for a LUKS qcow2 (format qcow2, encrypted, the
//     LUKS header's algorithms, the backing file): the image catalog
//     (images.Dir) and the header reads (encryption.Tool.Inspect) run
//     over it unchanged; for any other file, and every other command,
//     it runs the real qemu-img (plain qcow2 work takes milliseconds).
//
// The tests that check data (writePattern, readPattern, readImage,
// readThroughAny) read a fake disk's data identity instead of its
// blocks: "pattern:"+imagePattern once the pattern was written.
//
// Each operation keeps one path through the real qemu-img and LUKS:
// libvirt_*_test.go on the real libvirtd (TestLibvirtEncryptedImage,
// TestLibvirtShelveUnshelve, TestLibvirtRescue), and, where no libvirt test takes it, a test with
// withEncryption (TestAttachEncryptedDisk, TestFlavorEncryptionEndToEnd).
// The rest run here: each names the test that takes its real path.

const fakeLUKSMagic = "FAKE-LUKS"

// fakeDisk is a fake LUKS qcow2's content.
type fakeDisk struct {
	size    int64  // virtual size in bytes
	pass    string // hex sha256 of the passphrase
	data    string // what the guest reads: "blank" (its backing file's, if any) or a copied source's identity
	backing string // backing file (absolute), if any
	bformat string // the backing file's format
}

func (d fakeDisk) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nsize %d\npass %s\ndata %s\n", fakeLUKSMagic, d.size, d.pass, d.data)
	if d.backing != "" {
		fmt.Fprintf(&b, "backing %s\nbacking-format %s\n", d.backing, d.bformat)
	}
	return b.Bytes()
}

// readFakeDisk reads the fake LUKS disk at path; ok is false for any
// other file (a real image, a partial file).
func readFakeDisk(path string) (d fakeDisk, ok bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return fakeDisk{}, false, err
	}
	if !bytes.HasPrefix(b, []byte(fakeLUKSMagic+"\n")) {
		return fakeDisk{}, false, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Scan()
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		switch k {
		case "size":
			d.size, err = strconv.ParseInt(v, 10, 64)
		case "pass":
			d.pass = v
		case "data":
			d.data = v
		case "backing":
			d.backing = v
		case "backing-format":
			d.bformat = v
		}
		if err != nil {
			return fakeDisk{}, false, fmt.Errorf("fake LUKS disk %s: %w", path, err)
		}
	}
	return d, true, nil
}

func passDigest(pass []byte) string {
	sum := sha256.Sum256(pass)
	return hex.EncodeToString(sum[:])
}

// fakeLUKS is the controller's LUKS over fake disks; real is the real
// tool over the fake qemu-img, for header reads and for the files that
// are not fake disks (plain images).
type fakeLUKS struct {
	real    *encryption.Tool
	qemuImg string // the fake qemu-img
	qemuIO  string // the real qemu-io
}

// newFakeLUKS returns the fake LUKS tool and the fake qemu-img (a script
// in a temporary directory of t).
func newFakeLUKS(t *testing.T) (fakeLUKS, string) {
	t.Helper()
	qemuImg, qemuIO := fakeQemuImgScript(t, testenv.LookPath(t, "qemu-img")), testenv.LookPath(t, "qemu-io")
	return fakeLUKS{real: encryption.New(encryption.Options{QemuImg: qemuImg, QemuIO: qemuIO}), qemuImg: qemuImg, qemuIO: qemuIO}, qemuImg
}

// fakeQemuImgScripts are the fake qemu-img scripts written, by the real
// qemu-img they run, in one directory for the test binary.
var fakeQemuImgScripts struct {
	sync.Mutex
	dir   string
	paths map[string]string
}

// fakeQemuImgScript returns a qemu-img that answers `info` for the fake
// LUKS disks and runs real for everything else: written once per test
// binary (each env used to write its own, and a file written while
// another goroutine forks may not be run: ETXTBSY).
func fakeQemuImgScript(t *testing.T, real string) string {
	t.Helper()
	c := &fakeQemuImgScripts
	c.Lock()
	defer c.Unlock()
	if p, ok := c.paths[real]; ok {
		return p
	}
	if c.dir == "" {
		dir, err := os.MkdirTemp("", "vmeta-fake-qemu-img-")
		if err != nil {
			t.Fatal(err)
		}
		c.dir, c.paths = dir, map[string]string{}
		cleanups = append(cleanups, func() { os.RemoveAll(dir) })
	}
	p := filepath.Join(c.dir, fmt.Sprint(len(c.paths)), "qemu-img")
	if err := os.Mkdir(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	script := `#!/bin/sh
# qemu-img with fake LUKS disks (hostctl/controller/fakedisk_test.go)
if [ "$1" = info ]; then
	for f; do :; done
	# The first bytes only: read(1) would read a binary image byte by
	# byte up to its first newline.
	magic=
	[ -f "$f" ] && magic=$(head -c ` + strconv.Itoa(len(fakeLUKSMagic)+1) + ` -- "$f")
	if [ "$magic" = ` + fakeLUKSMagic + ` ]; then
		size=0 backing= bformat=
		while read -r k v; do
			case $k in
			size) size=$v ;;
			backing) backing=$v ;;
			backing-format) bformat=$v ;;
			esac
		done < "$f"
		printf '{"filename": "%s", "format": "qcow2", "virtual-size": %s, "encrypted": true' "$f" "$size"
		[ -n "$backing" ] && printf ', "backing-filename": "%s", "full-backing-filename": "%s", "backing-filename-format": "%s"' "$backing" "$backing" "$bformat"
		printf ', "format-specific": {"type": "qcow2", "data": {"compat": "1.1", "encrypt": {"format": "luks", "cipher-alg": "aes-256", "cipher-mode": "xts", "hash-alg": "sha256", "ivgen-alg": "plain64", "slots": [{"active": true}, {"active": false}]}}}}\n'
		exit 0
	fi
fi
exec ` + real + ` "$@"
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c.paths[real] = p
	return p
}

// size is the virtual size of a new disk: its spec's, else its base's
// (read in Go: no process).
func (l fakeLUKS) size(size string, base string) (int64, error) {
	if size != "" {
		n, err := model.ParseDiskSize(size)
		if err != nil {
			return 0, fmt.Errorf("fake LUKS: size %q: %w", size, err)
		}
		return n, nil
	}
	if base == "" {
		return 0, errors.New("fake LUKS: a disk needs a size or a base")
	}
	return virtualSize(base, "")
}

func (l fakeLUKS) Create(ctx context.Context, d encryption.Disk, pass []byte) error {
	if _, err := os.Lstat(d.Path); err == nil {
		return fmt.Errorf("fake LUKS: create %s: the file exists", d.Path)
	}
	fd := fakeDisk{pass: passDigest(pass), data: "blank"}
	base := ""
	if d.Base != nil {
		base, fd.backing, fd.bformat = d.Base.Path, d.Base.Path, d.Base.Format
		if _, err := os.Stat(base); err != nil {
			return fmt.Errorf("fake LUKS: backing file: %w", err)
		}
	}
	var err error
	if fd.size, err = l.size(d.Size, base); err != nil {
		return err
	}
	return os.WriteFile(d.Path, fd.encode(), 0o600)
}

// Inspect is the real header read (qemu-img info) of a plain image and,
// of a fake disk, the parse of what the fake qemu-img answers for it
// (fakeInfo), without running it.
func (l fakeLUKS) Inspect(ctx context.Context, path string) (encryption.Info, error) {
	d, fake, err := readFakeDisk(path)
	if err != nil || !fake {
		return l.real.Inspect(ctx, path)
	}
	return encryption.ParseInfo(fakeInfo(path, d))
}

// fakeInfo is `qemu-img info --output=json` of the fake disk d at path,
// as the real one answers for a LUKS qcow2 (but actual-size, which
// nothing reads); fakeQemuImgScript prints the same.
func fakeInfo(path string, d fakeDisk) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"filename": %q, "format": "qcow2", "virtual-size": %d, "encrypted": true`, path, d.size)
	if d.backing != "" {
		fmt.Fprintf(&b, `, "backing-filename": %q, "full-backing-filename": %q, "backing-filename-format": %q`, d.backing, d.backing, d.bformat)
	}
	b.WriteString(`, "format-specific": {"type": "qcow2", "data": {"compat": "1.1", "encrypt": {"format": "luks", "cipher-alg": "aes-256", "cipher-mode": "xts", "hash-alg": "sha256", "ivgen-alg": "plain64", "slots": [{"active": true}, {"active": false}]}}}}` + "\n")
	return b.Bytes()
}

// open checks pass (and backing, for a fake backing file) against the
// fake disk at path, as qemu-io's open does, and returns its data.
func (l fakeLUKS) open(path string, pass, backing []byte) (fakeDisk, string, error) {
	d, ok, err := readFakeDisk(path)
	if err != nil {
		return fakeDisk{}, "", fmt.Errorf("open %s: %w", path, err)
	}
	if !ok {
		return fakeDisk{}, "", fmt.Errorf("open %s: not a fake LUKS disk", path)
	}
	if d.pass != passDigest(pass) {
		return fakeDisk{}, "", fmt.Errorf("open %s: %w", path, encryption.ErrWrongPassphrase)
	}
	data := d.data
	if d.backing != "" {
		bd, fake, err := readFakeDisk(d.backing)
		switch {
		case err != nil:
			return fakeDisk{}, "", fmt.Errorf("open %s: backing file: %w", path, err)
		case fake && backing == nil:
			return fakeDisk{}, "", fmt.Errorf("open %s: backing file %s is encrypted and no passphrase was given", path, d.backing)
		case fake && bd.pass != passDigest(backing):
			return fakeDisk{}, "", fmt.Errorf("open %s: backing file: %w", path, encryption.ErrWrongPassphrase)
		}
		if data == "blank" {
			if data = bd.data; !fake {
				data = plainData(d.backing)
			}
		}
	}
	return d, data, nil
}

// plainData is the identity of a plain image's data.
func plainData(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unreadable"
	}
	sum := sha256.Sum256(b)
	return "plain:" + hex.EncodeToString(sum[:8])
}

func (l fakeLUKS) Verify(ctx context.Context, path string, pass, backing []byte) error {
	if _, fake, _ := readFakeDisk(path); !fake {
		return l.real.Verify(ctx, path, pass, backing)
	}
	_, _, err := l.open(path, pass, backing)
	return err
}

func (l fakeLUKS) VerifyImage(ctx context.Context, path, format string, pass []byte) error {
	if _, fake, _ := readFakeDisk(path); !fake {
		return l.real.VerifyImage(ctx, path, format, pass)
	}
	return l.Verify(ctx, path, pass, nil)
}

func (l fakeLUKS) Resize(ctx context.Context, path string, size int64, shrink bool, pass, backing []byte) error {
	if _, fake, _ := readFakeDisk(path); !fake {
		return l.real.Resize(ctx, path, size, shrink, pass, backing)
	}
	d, _, err := l.open(path, pass, backing)
	if err != nil {
		return err
	}
	if size < d.size && !shrink {
		return fmt.Errorf("fake LUKS: resize %s: use the --shrink option to shrink", path)
	}
	d.size = size
	return os.WriteFile(path, d.encode(), 0o600)
}

// Convert copies src flattened into a new fake disk under pass, or, when
// pass is nil, into a new plain qcow2 of its size (with the real
// qemu-img; a plain source is converted by the real tool: no LUKS) that
// holds imagePattern when src's data is the pattern (written with the
// real qemu-io: a plain write, milliseconds).
func (l fakeLUKS) Convert(ctx context.Context, dst string, src encryption.Source, pass []byte) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("fake LUKS: convert to %s: the file exists", dst)
	}
	_, fake, err := readFakeDisk(src.Path)
	if err != nil {
		return fmt.Errorf("fake LUKS: convert %s: %w", src.Path, err)
	}
	if !fake && pass == nil {
		return l.real.Convert(ctx, dst, src, nil)
	}
	out := fakeDisk{data: plainData(src.Path)}
	if fake {
		var d fakeDisk
		if d, out.data, err = l.open(src.Path, src.Pass, src.BackingPass); err != nil {
			return fmt.Errorf("convert %s: %w", src.Path, err)
		}
		out.size = d.size
	} else if out.size, err = l.size("", src.Path); err != nil {
		return err
	}
	if pass == nil {
		if err := (goImages{}).Create(ctx, images.Disk{Path: dst, Size: strconv.FormatInt(out.size, 10)}); err != nil {
			return err
		}
		if out.data != patternData {
			return nil
		}
		if b, err := exec.CommandContext(ctx, l.qemuIO, "-f", "qcow2", dst, "-c", "write -P "+imagePattern+" 0 64k").CombinedOutput(); err != nil {
			return fmt.Errorf("fake LUKS: convert %s: qemu-io write: %w: %s", src.Path, err, b)
		}
		return nil
	}
	out.pass = passDigest(pass)
	return os.WriteFile(dst, out.encode(), 0o600)
}

// withFakeDisks puts e's controller on the fake disk layer: the fake LUKS
// tool (failing as f says) and an image catalog, disk and template maker
// over the fake qemu-img. It returns the fake qemu-img.
func withFakeDisks(t *testing.T, e *env, f *faults) string {
	t.Helper()
	l, qemuImg := newFakeLUKS(t)
	e.fakeQemuImg = qemuImg
	e.dp().LUKS = faultyLUKS{l, f}
	setImagesTool(e, qemuImg)
	return qemuImg
}

// setImagesTool makes e's image catalog, disk maker and templates run
// qemuImg.
func setImagesTool(e *env, qemuImg string) {
	e.c.imageDir = images.New(filepath.Join(e.dir, "images"), images.Options{QemuImg: qemuImg})
	e.dp().Catalog = e.c.imageDir
	e.dp().Images = goImages{Images: e.c.imageDir}
	e.dp().Templates = e.c.imageDir.NewTemplates(filepath.Join(e.dir, "instances", "_base"))
}

// patternData is the data of a fake disk that holds imagePattern.
const patternData = "pattern:" + imagePattern

// makeFakeEncryptedImage is makeEncryptedImage on the fake disk layer: a
// fake LUKS image of 32 MiB under pass whose data is imagePattern.
func makeFakeEncryptedImage(t *testing.T, p string, pass []byte) {
	t.Helper()
	d := fakeDisk{size: 32 << 20, pass: passDigest(pass), data: patternData}
	if err := os.WriteFile(p, d.encode(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// fakeWritePattern is writePattern on a fake disk: opened with pass, the
// disk at p holds imagePattern from now on. ok is false (and nothing is
// done) when p is not a fake disk.
func fakeWritePattern(p string, pass []byte) (ok bool, err error) {
	if _, fake, err := readFakeDisk(p); err != nil || !fake {
		return false, err
	}
	d, _, err := fakeLUKS{}.open(p, pass, nil)
	if err != nil {
		return true, err
	}
	d.data = patternData
	return true, os.WriteFile(p, d.encode(), 0o600)
}

// fakeReadPattern is a read of imagePattern from the fake disk at p
// opened with pass (and backing for its encrypted backing file), as
// qemu-io's `read -P` is for a real one: an error when the disk does not
// open or holds other data. ok is false when p is not a fake disk.
func fakeReadPattern(p string, pass, backing []byte) (ok bool, err error) {
	if _, fake, err := readFakeDisk(p); err != nil || !fake {
		return false, err
	}
	_, data, err := fakeLUKS{}.open(p, pass, backing)
	if err != nil {
		return true, err
	}
	if data != patternData {
		return true, fmt.Errorf("read %s: Pattern verification failed: the disk holds %q", p, data)
	}
	return true, nil
}

// readThroughAny is readThrough (backing_test.go) for a real or a fake
// disk.
func readThroughAny(t *testing.T, p string, pass, backing []byte) error {
	t.Helper()
	if ok, err := fakeReadPattern(p, pass, backing); ok {
		return err
	}
	return readThrough(t, p, pass, backing)
}

// TestFakeInfoMatchesScript: the fake LUKS's Inspect, answered in Go,
// reads a fake disk as the image catalog does through the fake
// qemu-img.
func TestFakeInfoMatchesScript(t *testing.T) {
	t.Parallel()
	l, qemuImg := newFakeLUKS(t)
	dir := t.TempDir()
	base, p := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "disk.qcow2")
	makeFakeEncryptedImage(t, base, []byte("image"))
	ctx := context.Background()
	if err := l.Create(ctx, encryption.Disk{Path: p, Base: &encryption.Base{Path: base, Format: "qcow2"}}, []byte("disk")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{base, p} {
		out, err := exec.Command(qemuImg, "info", "--output=json", "-U", f).Output()
		if err != nil {
			t.Fatal(err)
		}
		want, err := encryption.ParseInfo(out)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Inspect(ctx, f)
		if err != nil || got != want {
			t.Errorf("%s: Inspect %+v (%v), the fake qemu-img %+v", filepath.Base(f), got, err, want)
		}
	}
}
