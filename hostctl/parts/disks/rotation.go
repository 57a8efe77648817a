package disks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
)

// What the disk passphrase rotator (hostctl/diskrotate, its Disks
// interface) asks of the part: the block-device records of this host's
// instances, one disk's record rewritten, and libvirt's copy of a
// rotated passphrase.

// HostBlockDevices returns the block-device records of this host's
// instances, by instance UUID (none when the store keeps no records). A
// record that cannot be decoded is left out and named in the error.
func (pt *Part) HostBlockDevices(ctx context.Context) (map[string]encryption.BlockDevices, error) {
	if pt.Records == nil {
		return nil, nil
	}
	recs, err := pt.Records.Records(ctx, blockDevPrefix)
	if err != nil {
		return nil, fmt.Errorf("block devices: %w", err)
	}
	out := map[string]encryption.BlockDevices{}
	var errs []error
	for _, sr := range recs {
		rec, err := encryption.DecodeBlockDevices(sr.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sr.Key, err))
			continue
		}
		if rec.Host == pt.Host {
			out[strings.TrimPrefix(sr.Key, blockDevPrefix)] = rec
		}
	}
	return out, errors.Join(errs...)
}

// SetBlockDevice rewrites the block-device record of one disk of in
// (bd.Disk); refused when the store keeps no records.
func (pt *Part) SetBlockDevice(ctx context.Context, in *model.Instance, bd encryption.BlockDevice) error {
	if pt.Records == nil {
		return fmt.Errorf("block devices of %s: no record store", in.Name)
	}
	return pt.UpdateBlockDevices(ctx, nil, in, map[string]*encryption.BlockDevice{bd.Disk: &bd})
}

// UpdateLibvirtSecret gives the libvirt secret id of in's disk, if
// libvirt has it defined, the value pass (redefined on the same UUID and
// usage); updated is false when it has none (or there is no hypervisor).
func (pt *Part) UpdateLibvirtSecret(ctx context.Context, in *model.Instance, disk, id string, pass []byte) (updated bool, err error) {
	if pt.Secrets == nil {
		return false, nil
	}
	usage := pt.SecretUsage(in.UUID, disk)
	ss, err := pt.Secrets.Secrets(ctx, usage)
	if err != nil {
		return false, fmt.Errorf("libvirt secrets: %w", err)
	}
	for _, s := range ss {
		if s.UUID == id {
			if err := pt.Secrets.DefineSecret(ctx, virt.LibvirtSecret{UUID: id, Usage: usage}, pass); err != nil {
				return false, fmt.Errorf("update libvirt secret %s: %w", id, err)
			}
			updated = true
		}
	}
	return updated, nil
}
