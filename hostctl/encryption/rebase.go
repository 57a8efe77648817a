package encryption

import (
	"context"
	"fmt"
)

// Rebase points the qcow2 image at path at another backing file (backing,
// of format) without touching its data (`qemu-img rebase -u`): a moved
// disk whose backing file sits under another data directory on this
// host (hostctl/migrate). An encrypted image is opened with pass (on a
// pipe, as every passphrase here); nil for a plain one.
func (t *Tool) Rebase(ctx context.Context, path, backing, format string, pass []byte) error {
	if pass == nil {
		args := []string{"rebase", "-u", "-b", backing, "-F", format, path}
		if err := runWithSecrets(ctx, t.qemuImg, args); err != nil {
			return fmt.Errorf("rebase %s onto %s: %w", path, backing, err)
		}
		return nil
	}
	args := []string{"rebase", "-u", "--object", "secret,id=sec0,file=/dev/fd/3",
		"--image-opts", "driver=qcow2,file.filename=" + optEscape(path) + ",encrypt.key-secret=sec0",
		"-b", backing, "-F", format}
	if err := runWithSecret(ctx, t.qemuImg, args, pass); err != nil {
		return fmt.Errorf("rebase %s onto %s: %w", path, backing, err)
	}
	return nil
}
