package cli

import (
	"context"
	"flag"
)

// resizeCommands are `hostctl instance resize|rebuild`.
func resizeCommands() []*Command {
	return []*Command{
		{Name: "instance resize", Args: "NAME --flavor F", Client: true, Setup: instanceResize,
			Summary: "give a stopped instance another flavor (disks grow, never shrink; refused with 409 when the flavors' ephemeral encryption settings differ)",
			Help: "The instance must be stopped. It gets the flavor's vCPUs and RAM; its root and ephemeral\n" +
				"disks grow to the flavor's sizes in place, its swap disk is made anew, and a disk the flavor\n" +
				"adds is created. A flavor with a smaller disk, or without a disk the instance has, is refused.\n" +
				"A flavor whose ephemeral encryption settings (hw:ephemeral_encryption,\n" +
				"hw:ephemeral_encryption_format) would change the instance's encryption is refused with 409\n" +
				"naming both flavors: disks are not converted in place."},
		{Name: "instance rebuild", Args: "NAME --image IMG", Client: true, Setup: instanceRebuild,
			Summary: "make a stopped instance's root disk anew from an image (other disks and tags kept; refused with 409 when the images' ephemeral encryption settings differ)",
			Help: "The instance must be stopped. Its root disk is replaced by a new one made from the image;\n" +
				"its other disks, tags and settings stay. An image whose ephemeral encryption settings\n" +
				"(hw_ephemeral_encryption, hw_ephemeral_encryption_format, an encrypted image's\n" +
				"os_encrypt_key_id) differ from the current image's is refused with 409 naming both images."},
	}
}

func instanceResize(fs *flag.FlagSet) func(context.Context, *Call) error {
	flavor := fs.String("flavor", "", "the new flavor (required)")
	return func(ctx context.Context, c *Call) error {
		name, err := c.OneName()
		if err != nil {
			return err
		}
		if *flavor == "" {
			return Usagef("instance resize needs --flavor")
		}
		inst, err := c.Client().Resize(ctx, name, *flavor)
		if err != nil {
			return err
		}
		return printApplied(c, inst)
	}
}

func instanceRebuild(fs *flag.FlagSet) func(context.Context, *Call) error {
	image := fs.String("image", "", "the image (required)")
	return func(ctx context.Context, c *Call) error {
		name, err := c.OneName()
		if err != nil {
			return err
		}
		if *image == "" {
			return Usagef("instance rebuild needs --image")
		}
		inst, err := c.Client().Rebuild(ctx, name, *image)
		if err != nil {
			return err
		}
		return printApplied(c, inst)
	}
}
