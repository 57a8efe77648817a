package cli

import (
	"context"
	"flag"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// snapshotCommands are `hostctl instance snapshot`.
func snapshotCommands() []*Command {
	return []*Command{
		{Name: "instance snapshot", Args: "NAME --name IMG [--encryption-key same|new|existing|none] [--secret-uuid U]", Client: true, Setup: instanceSnapshot,
			Summary: "copy a stopped instance's root disk into a new image, encrypted as --encryption-key says",
			Help: "The instance must be stopped. Its root disk, backing chain flattened, becomes image IMG of the\n" +
				"image directory. --encryption-key:\n" +
				"  same      (default) a new secret with the root disk's passphrase (a plain root disk: a plain image)\n" +
				"  new       a newly generated secret: the image is re-encrypted\n" +
				"  existing  the secret --secret-uuid, which the instance's project may read\n" +
				"  none      a plain image\n" +
				"An encrypted image gets os_encrypt_format, os_encrypt_cipher, os_encrypt_key_id,\n" +
				"os_encrypt_key_deletion_policy (on_image_deletion for a secret the snapshot made,\n" +
				"do_not_delete for yours), os_decrypt_container_format and os_decrypt_size; an instance\n" +
				"booted from it is encrypted. Another project's secret is refused with 409 naming both."},
	}
}

func instanceSnapshot(fs *flag.FlagSet) func(context.Context, *Call) error {
	image := fs.String("name", "", "the new image's name (required)")
	key := fs.String("encryption-key", "same", "same, new, existing or none")
	secret := fs.String("secret-uuid", "", "the secret of --encryption-key existing")
	return func(ctx context.Context, c *Call) error {
		name, err := c.OneName()
		if err != nil {
			return err
		}
		if *image == "" {
			return Usagef("instance snapshot needs --name")
		}
		switch *key {
		case "same", "new", "none":
			if *secret != "" {
				return Usagef("--secret-uuid goes with --encryption-key existing")
			}
		case "existing":
			if *secret == "" {
				return Usagef("--encryption-key existing needs --secret-uuid")
			}
		default:
			return Usagef("--encryption-key %q: want same, new, existing or none", *key)
		}
		img, err := c.Client().Snapshot(ctx, name, types.SnapshotRequest{Image: *image, EncryptionKey: *key, SecretUUID: *secret})
		if err != nil {
			return err
		}
		return printImage(c, img)
	}
}
