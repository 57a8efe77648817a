//go:build !linux

package source

import (
	"context"
	"errors"
)

// LoadFirmwareModule is Linux only.
func LoadFirmwareModule(context.Context) error {
	return errors.New("loading qemu_fw_cfg needs Linux")
}
