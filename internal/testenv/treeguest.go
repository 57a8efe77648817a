//go:build unix

package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// debianBaseTimeout bounds `build-image --base`: instant when the tree is
// cached (test/setup builds it), minutes of mmdebstrap when it is not.
const debianBaseTimeout = 20 * time.Minute

// DebianBaseTree returns the Debian 12 tree test/debianvm/build-image
// keeps as its base layer (mmdebstrap of bookworm with Debian's generic
// kernel and all its modules, cached under /var/cache/vmeta-test by the
// hash of its inputs): the script prints it, building it first only when
// test/setup has not. repoRoot is the module's root. Without root or
// mmdebstrap the test stops through Require.
func DebianBaseTree(t testing.TB, repoRoot string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		Require(t, "root", "test/debianvm/build-image needs root (mmdebstrap, chroot)")
		return ""
	}
	LookPath(t, "mmdebstrap")
	LookPath(t, "mkfs.ext4")
	ctx, cancel := context.WithTimeout(context.Background(), debianBaseTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot, "test", "debianvm", "build-image"), "--base")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build-image --base: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := lines[len(lines)-1]
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		t.Fatalf("build-image --base printed %q, not a complete tree: %v\n%s", dir, err, stderr.String())
	}
	return dir
}

// BuildTreeGuest writes dir/initrd.cpio for the kernel of the Debian tree
// root (root/boot/vmlinuz-KVER, the one kernel in root/lib/modules): busybox-static from
// the host, the named modules of that kernel with every module
// modules.dep says they need (in load order), extra (programs, with
// Libs their shared libraries) and an /init like BuildGuestImage's: it
// mounts /proc, /sys, /dev and /run, loads the modules, prints
// GuestReady, runs script with busybox sh (PATH
// /usr/sbin:/usr/bin:/sbin:/bin, busybox applets in /bin), prints
// GuestDone and powers off.
//
// Unlike BuildGuest and BuildGuestImage (test/setup's GuestKernelDir,
// which keeps only the modules of block and virtio devices), any module
// of Debian's kernel can be had this way: the NFS client, for one.
func BuildTreeGuest(t testing.TB, dir, root string, modules []string, extra []GuestFile, script string) Guest {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "lib", "modules"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("tree %s: want one kernel in lib/modules, have %d (%v)", root, len(ents), err)
	}
	kver := ents[0].Name()
	kernel := filepath.Join(root, "boot", "vmlinuz-"+kver)
	if _, err := os.Stat(kernel); err != nil {
		t.Fatalf("tree %s: kernel: %v", root, err)
	}
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		Require(t, "busybox", "/bin/busybox is missing (install busybox-static)")
		return Guest{}
	}
	moddir := filepath.Join(root, "lib", "modules", kver)
	order, err := moduleLoadOrder(moddir, modules)
	if err != nil {
		t.Fatalf("tree %s: %v", root, err)
	}
	var w cpioWriter
	a := newArchive(&w, true)
	a.add(t, GuestFile{Path: "/bin/busybox", Src: busybox, Mode: 0o755})
	var names []string
	for _, rel := range order {
		name := strings.TrimSuffix(path.Base(rel), ".ko")
		names = append(names, name)
		a.add(t, GuestFile{Path: "/modules/" + name + ".ko", Src: filepath.Join(moddir, rel)})
	}
	a.add(t, GuestFile{Path: "/modules/order", Data: []byte(strings.Join(names, "\n") + "\n")})
	for _, f := range extra {
		a.add(t, f)
	}
	init := "#!/bin/busybox sh\n" +
		"/bin/busybox --install -s /bin\n" +
		"export PATH=/usr/sbin:/usr/bin:/sbin:/bin\n" +
		"mount -t proc proc /proc\nmount -t sysfs sysfs /sys\nmount -t devtmpfs devtmpfs /dev\nmount -t tmpfs -o mode=0755 tmpfs /run\n" +
		"mkdir -p /dev/pts /dev/shm /tmp\n" +
		"for m in $(cat /modules/order); do insmod /modules/$m.ko || echo \"vmeta-guest: insmod $m failed\"; done\n" +
		"echo '" + GuestReady + "'\n" +
		script + "\n" +
		"echo '" + GuestDone + "'\n" +
		"poweroff -f\n"
	a.add(t, GuestFile{Path: "/init", Data: []byte(init), Mode: 0o755})
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := os.WriteFile(initrd, w.finish(), 0o644); err != nil {
		t.Fatalf("write initramfs: %v", err)
	}
	return Guest{Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0 panic=-1 quiet loglevel=3"}
}

// moduleLoadOrder reads moddir/modules.dep and returns the files (relative
// to moddir) to insmod for modules, each after those it needs, each once.
// modules.dep lists a module's whole closure, the one to load last first.
func moduleLoadOrder(moddir string, modules []string) ([]string, error) {
	f, err := os.Open(filepath.Join(moddir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("module dependencies: %w", err)
	}
	defer f.Close()
	deps := map[string][]string{} // module name -> closure, load last first
	files := map[string]string{}  // module name -> file
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		file, need, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		name := modName(file)
		files[name] = file
		deps[name] = strings.Fields(need)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("module dependencies: %w", err)
	}
	var order []string
	seen := map[string]bool{}
	for _, m := range modules {
		m = strings.ReplaceAll(m, "-", "_")
		file, ok := files[m]
		if !ok {
			return nil, fmt.Errorf("module %s: not in %s/modules.dep (built into the kernel, or not shipped)", m, moddir)
		}
		need := deps[m]
		for i := len(need) - 1; i >= 0; i-- {
			if !seen[need[i]] {
				seen[need[i]] = true
				order = append(order, need[i])
			}
		}
		if !seen[file] {
			seen[file] = true
			order = append(order, file)
		}
	}
	return order, nil
}

// modName is a module's name from its file: kernel/fs/nfs/nfsv4.ko -> nfsv4
// (dashes as underscores, as the kernel names modules).
func modName(file string) string {
	return strings.ReplaceAll(strings.TrimSuffix(path.Base(file), ".ko"), "-", "_")
}
