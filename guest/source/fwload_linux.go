package source

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// firmwareModule is the Linux module that lists fw_cfg files in sysfs
// (CONFIG_FW_CFG_SYSFS).
const firmwareModule = "qemu_fw_cfg"

// modprobeDirs are where modprobe.d(5) configuration lives.
var modprobeDirs = []string{"/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/lib/modprobe.d", "/usr/lib/modprobe.d"}

// LoadFirmwareModule loads qemu_fw_cfg. A module that is loaded already,
// or built in, is no error. It asks the kernel directly (finit_module(2)
// of the file modules.dep names) when modules.dep says the module depends
// on no other and no modprobe.d file or kernel parameter gives it options
// or an install command: what modprobe would do then, without starting
// modprobe (under emulation, starting it took most of the first read of
// the metadata at boot, 0.2-0.6 s). Otherwise, or when the kernel refuses
// (a compressed module the kernel cannot decompress itself), it runs
// modprobe (which knows dependencies, options and compression), and
// without one loads the file it finds under /lib/modules/<release> (a
// minimal initramfs with busybox and no modules.dep).
func LoadFirmwareModule(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join("/sys/module", firmwareModule)); err == nil {
		return nil
	}
	var errs []error
	root, rootErr := modulesRoot()
	if rootErr != nil {
		errs = append(errs, rootErr)
	} else if p, ok := directLoad(root, firmwareModule); ok {
		err := finitModuleFile(firmwareModule, p)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	if mp, err := exec.LookPath("modprobe"); err == nil {
		out, err := exec.CommandContext(ctx, mp, "-q", firmwareModule).CombinedOutput()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("modprobe %s: %w: %s", firmwareModule, err, bytes.TrimSpace(out)))
	}
	if rootErr != nil {
		return errors.Join(errs...)
	}
	if err := finitModule(root, firmwareModule); err != nil {
		errs = append(errs, err)
		return errors.Join(errs...)
	}
	return nil
}

// modulesRoot is /lib/modules/<release> of the running kernel.
func modulesRoot() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return filepath.Join("/lib/modules", unix.ByteSliceToString(u.Release[:])), nil
}

// directLoad returns the module file of name when it may be loaded
// without modprobe: modules.dep under root lists it without dependencies,
// and neither modprobe.d nor the kernel command line configures it.
func directLoad(root, name string) (string, bool) {
	f, err := os.Open(filepath.Join(root, "modules.dep"))
	if err != nil {
		return "", false
	}
	rel, deps, found := moduleDep(f, name)
	f.Close()
	if !found || len(deps) > 0 {
		return "", false
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	if modprobeConfigures(modprobeDirs, string(cmdline), name) {
		return "", false
	}
	if filepath.IsAbs(rel) {
		return rel, true
	}
	return filepath.Join(root, rel), true
}

// moduleDep finds module name in modules.dep ("kernel/drivers/firmware/
// qemu_fw_cfg.ko: dep.ko other.ko" per line) and returns its path and
// the modules it depends on. Module names treat '-' and '_' alike.
func moduleDep(r io.Reader, name string) (path string, deps []string, found bool) {
	want := strings.ReplaceAll(name, "-", "_")
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		p, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		base := filepath.Base(p)
		i := strings.Index(base, ".ko")
		if i < 0 || (len(base) > i+3 && base[i+3] != '.') {
			continue
		}
		if strings.ReplaceAll(base[:i], "-", "_") == want {
			return p, strings.Fields(rest), true
		}
	}
	return "", nil, false
}

// modprobeConfigures reports whether modprobe would load module name
// differently from a bare finit_module: options, an install command or
// soft dependencies for it in a modprobe.d file (*.conf) of dirs, or a
// name.param= parameter on the kernel command line. A blacklist line does
// not count: it only keeps modprobe from loading the module by an alias,
// not by its name.
func modprobeConfigures(dirs []string, cmdline, name string) bool {
	want := strings.ReplaceAll(name, "-", "_")
	norm := func(s string) string { return strings.ReplaceAll(s, "-", "_") }
	for _, a := range strings.Fields(cmdline) {
		if m, _, ok := strings.Cut(a, "."); ok && norm(m) == want && strings.Contains(a, "=") {
			return true
		}
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".conf") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(d, e.Name()))
			if err != nil {
				return true // cannot tell: let modprobe read it
			}
			for _, l := range strings.Split(string(b), "\n") {
				f := strings.Fields(l)
				if len(f) < 2 {
					continue
				}
				switch f[0] {
				case "options", "install", "softdep", "remove":
					if norm(f[1]) == want {
						return true
					}
				}
			}
		}
	}
	return false
}

// finitModule loads module name from root (/lib/modules/<release>),
// looking for its file: an uncompressed .ko, or a compressed one the
// kernel decompresses itself (MODULE_INIT_COMPRESSED_FILE, Linux 6.4 and
// later).
func finitModule(root, name string) error {
	var found string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found != "" {
			return nil
		}
		base := d.Name()
		if !d.IsDir() && (base == name+".ko" || strings.HasPrefix(base, name+".ko.")) {
			found = p
			return fs.SkipAll
		}
		return nil
	})
	if found == "" {
		return fmt.Errorf("load %s: no %s.ko under %s", name, name, root)
	}
	return finitModuleFile(name, found)
}

// finitModuleFile loads module name from file p.
func finitModuleFile(name, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("load %s: %w", name, err)
	}
	defer f.Close()
	flags := 0
	if !strings.HasSuffix(p, ".ko") {
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}
	if err := unix.FinitModule(int(f.Fd()), "", flags); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load %s (finit_module %s): %w", name, p, err)
	}
	return nil
}
