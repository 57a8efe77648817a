//go:build unix

package testenv

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// GuestFile is one file of a test guest's initramfs.
type GuestFile struct {
	// Path is where the file is in the guest (absolute).
	Path string
	// Src is the host file to copy; Data the content when Src is empty.
	Src  string
	Data []byte
	// Link, when set, makes Path a symbolic link to Link.
	Link string
	// Mode is the permission bits; 0644, or 0755 for a Src the host can
	// execute, when zero.
	Mode os.FileMode
	// Libs also copies the shared libraries the program needs (as ldd
	// lists them, the loader included) to their host paths.
	Libs bool
}

// GuestImageCacheDir keeps the base archives BuildGuestImage builds, by
// the hash of their inputs, so later runs skip copying kernel modules,
// programs and libraries.
const GuestImageCacheDir = "/var/cache/vmeta/guest-initramfs"

// guestImageVersion changes when the base archive's layout changes.
const guestImageVersion = "1"

// BuildGuestImage writes dir/initrd.cpio for Debian's kernel (test/setup
// unpacks it into GuestKernelDir): a base archive with busybox-static,
// the kernel modules and base (programs with their libraries: udevd, ip,
// findmnt), cached in GuestImageCacheDir, followed by an archive of extra
// (files that change from run to run, like the program under test) and
// an /init. The kernel unpacks both: concatenated newc archives are one
// initramfs.
//
// /init mounts /proc, /sys, /dev (devtmpfs) and /run (tmpfs), loads the
// modules, prints GuestReady, runs script with busybox sh (PATH
// /usr/sbin:/usr/bin:/sbin:/bin, busybox applets in /bin), prints
// GuestDone and powers off. Without the kernel or busybox the test stops
// through Require.
func BuildGuestImage(t testing.TB, dir string, base, extra []GuestFile, script string) Guest {
	t.Helper()
	kernel := filepath.Join(GuestKernelDir, "vmlinuz")
	order, err := os.ReadFile(filepath.Join(GuestKernelDir, "modules.order"))
	if _, kerr := os.Stat(kernel); kerr != nil || err != nil {
		Require(t, "guest kernel", fmt.Sprintf("%s/vmlinuz and modules.order are missing (test/setup unpacks them)", GuestKernelDir))
		return Guest{}
	}
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		Require(t, "busybox", "/bin/busybox is missing (install busybox-static)")
		return Guest{}
	}
	for _, f := range base {
		if f.Src != "" {
			if _, err := os.Stat(f.Src); err != nil {
				Require(t, f.Src, err.Error())
				return Guest{}
			}
		}
	}
	baseFiles := []GuestFile{{Path: "/bin/busybox", Src: busybox, Mode: 0o755}, {Path: "/modules/order", Data: order}}
	for _, m := range strings.Fields(string(order)) {
		baseFiles = append(baseFiles, GuestFile{Path: "/modules/" + m + ".ko", Src: filepath.Join(GuestKernelDir, "modules", m+".ko")})
	}
	baseFiles = append(baseFiles, base...)
	baseArchive := cachedArchive(t, baseFiles)

	init := "#!/bin/busybox sh\n" +
		"/bin/busybox --install -s /bin\n" +
		"export PATH=/usr/sbin:/usr/bin:/sbin:/bin\n" +
		"mount -t proc proc /proc\nmount -t sysfs sysfs /sys\nmount -t devtmpfs devtmpfs /dev\nmount -t tmpfs -o mode=0755 tmpfs /run\n" +
		"mkdir -p /dev/pts /dev/shm /tmp\n" +
		"for m in $(cat /modules/order); do insmod /modules/$m.ko 2>/dev/null || echo \"vmeta-guest: insmod $m failed\"; done\n" +
		"echo '" + GuestReady + "'\n" +
		script + "\n" +
		"echo '" + GuestDone + "'\n" +
		"poweroff -f\n"
	var w cpioWriter
	a := newArchive(&w, false)
	for _, f := range extra {
		a.add(t, f)
	}
	a.add(t, GuestFile{Path: "/init", Data: []byte(init), Mode: 0o755})
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := os.WriteFile(initrd, append(append([]byte(nil), baseArchive...), w.finish()...), 0o644); err != nil {
		t.Fatalf("write initramfs: %v", err)
	}
	return Guest{Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0 panic=-1 quiet loglevel=3"}
}

// cachedArchive returns the archive of files, from the cache when its
// inputs (paths, sizes, modification times, modes) are unchanged.
func cachedArchive(t testing.TB, files []GuestFile) []byte {
	t.Helper()
	h := sha256.New()
	fmt.Fprintf(h, "v%s\n", guestImageVersion)
	for _, f := range files {
		fmt.Fprintf(h, "%s|%s|%s|%o|%t|%x\n", f.Path, f.Src, f.Link, f.Mode, f.Libs, sha256.Sum256(f.Data))
		if f.Src != "" {
			if fi, err := os.Stat(f.Src); err == nil {
				fmt.Fprintf(h, "%d|%d\n", fi.Size(), fi.ModTime().UnixNano())
			}
		}
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]
	cache := filepath.Join(GuestImageCacheDir, key+".cpio")
	if b, err := os.ReadFile(cache); err == nil {
		t.Logf("guest initramfs: base archive from the cache (%s, %d MiB)", cache, len(b)>>20)
		return b
	}
	var w cpioWriter
	a := newArchive(&w, true)
	for _, f := range files {
		a.add(t, f)
	}
	b := w.buf.Bytes() // no trailer: the next archive follows
	if err := os.MkdirAll(GuestImageCacheDir, 0o755); err == nil {
		tmp := cache + ".tmp" + fmt.Sprint(os.Getpid())
		if err := os.WriteFile(tmp, b, 0o644); err == nil && os.Rename(tmp, cache) == nil {
			t.Logf("guest initramfs: base archive cached as %s (%d MiB)", cache, len(b)>>20)
			pruneCache(cache)
		} else {
			os.Remove(tmp)
		}
	}
	return b
}

// guestImageCacheKeep is how many base archives the cache keeps (inputs
// change with package upgrades; each archive is some 20 MiB).
const guestImageCacheKeep = 4

// pruneCache removes all but the newest cached archives, never keep.
func pruneCache(keep string) {
	ents, err := os.ReadDir(GuestImageCacheDir)
	if err != nil {
		return
	}
	type entry struct {
		path string
		mod  int64
	}
	var es []entry
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".cpio") {
			es = append(es, entry{filepath.Join(GuestImageCacheDir, e.Name()), fi.ModTime().UnixNano()})
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].mod > es[j].mod })
	for i, e := range es {
		if i >= guestImageCacheKeep && e.path != keep {
			os.Remove(e.path)
		}
	}
}

// archive adds files to a cpio writer, creating every parent directory
// once (the kernel's unpacker does not create them) and each file once.
type archive struct {
	w    *cpioWriter
	seen map[string]bool
}

func newArchive(w *cpioWriter, skeleton bool) *archive {
	a := &archive{w: w, seen: map[string]bool{}}
	if !skeleton {
		return a
	}
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "lib", "lib64", "etc", "dev", "proc", "sys", "run", "mnt", "tmp", "modules", "root", "var"} {
		a.dir(d)
	}
	a.w.device("dev/console", 5, 1)
	return a
}

func (a *archive) dir(d string) {
	if d == "." || d == "/" || d == "" || a.seen[d] {
		return
	}
	a.dir(path.Dir(d))
	a.seen[d] = true
	a.w.dir(d)
}

func (a *archive) add(t testing.TB, f GuestFile) {
	t.Helper()
	p := strings.TrimPrefix(path.Clean(f.Path), "/")
	if a.seen[p] {
		return
	}
	a.dir(path.Dir(p))
	a.seen[p] = true
	switch {
	case f.Link != "":
		a.w.entry(p, 0o120777, 0, 0, []byte(f.Link))
		return
	case f.Src == "":
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		a.w.file(p, f.Data, int(mode))
		return
	}
	b, err := os.ReadFile(f.Src)
	if err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	mode := f.Mode
	if mode == 0 {
		mode = 0o644
		if fi, err := os.Stat(f.Src); err == nil && fi.Mode()&0o111 != 0 {
			mode = 0o755
		}
	}
	a.w.file(p, b, int(mode))
	if f.Libs {
		for _, lib := range sharedLibs(t, f.Src) {
			a.add(t, GuestFile{Path: lib, Src: lib, Mode: 0o755})
		}
	}
}

var reLddLine = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)`)

// sharedLibs lists the libraries ldd says prog loads (none for a static
// program).
func sharedLibs(t testing.TB, prog string) []string {
	t.Helper()
	out, err := exec.Command("ldd", prog).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil
		}
		t.Fatalf("ldd %s: %v: %s", prog, err, out)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "not found") {
			t.Fatalf("ldd %s: %s", prog, sc.Text())
		}
		if m := reLddLine.FindStringSubmatch(sc.Text()); m != nil {
			libs = append(libs, m[1])
		}
	}
	sort.Strings(libs)
	return libs
}
