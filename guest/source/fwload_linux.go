package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// LoadFirmwareModule loads qemu_fw_cfg: with modprobe when there is one
// (it knows the module's dependencies, blacklists and compression), else
// by finit_module(2) of the module file under /lib/modules/<release> (a
// minimal initramfs with busybox and no modules.dep). A module that is
// loaded already, or built in, is no error.
func LoadFirmwareModule(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join("/sys/module", firmwareModule)); err == nil {
		return nil
	}
	var errs []error
	if mp, err := exec.LookPath("modprobe"); err == nil {
		out, err := exec.CommandContext(ctx, mp, "-q", firmwareModule).CombinedOutput()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("modprobe %s: %w: %s", firmwareModule, err, bytes.TrimSpace(out)))
	}
	if err := finitModule(firmwareModule); err != nil {
		errs = append(errs, err)
		return errors.Join(errs...)
	}
	return nil
}

// finitModule loads module name from /lib/modules/<release>: an
// uncompressed .ko, or a compressed one the kernel decompresses itself
// (MODULE_INIT_COMPRESSED_FILE, Linux 6.4 and later).
func finitModule(name string) error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fmt.Errorf("uname: %w", err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	root := filepath.Join("/lib/modules", release)
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
	f, err := os.Open(found)
	if err != nil {
		return fmt.Errorf("load %s: %w", name, err)
	}
	defer f.Close()
	flags := 0
	if !strings.HasSuffix(found, ".ko") {
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}
	if err := unix.FinitModule(int(f.Fd()), "", flags); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load %s (finit_module %s): %w", name, found, err)
	}
	return nil
}
