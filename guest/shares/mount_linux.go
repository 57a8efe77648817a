package shares

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Mount implements Mounter.
func (System) Mount(tag, dir string) error {
	err := unix.Mount(tag, dir, FSType, 0, "")
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		return fmt.Errorf("mount -t virtiofs %s %s: %w (%w)", tag, dir, ErrNoTag, err)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("mount -t virtiofs %s %s: %w (the kernel has no virtiofs: load the virtiofs module)", tag, dir, err)
	}
	return fmt.Errorf("mount -t virtiofs %s %s: %w", tag, dir, err)
}

// Unmount implements Mounter.
func (System) Unmount(dir string) error {
	if err := unix.Unmount(dir, 0); err != nil {
		return fmt.Errorf("umount %s: %w", dir, err)
	}
	return nil
}
