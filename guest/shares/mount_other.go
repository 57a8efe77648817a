//go:build !linux

package shares

import "errors"

var errNotLinux = errors.New("virtiofs mounts need Linux")

// Mount implements Mounter.
func (System) Mount(tag, dir string) error { return errNotLinux }

// Unmount implements Mounter.
func (System) Unmount(dir string) error { return errNotLinux }
