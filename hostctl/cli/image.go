package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// imageCommands are `hostctl image import|list|show|delete`.
func imageCommands() []*Command {
	return []*Command{
		{Name: "image import", Args: "FILE --name N [--property KEY=VALUE]…", Summary: "add a qcow2 or raw image to the host's image directory", Client: true, Setup: imageImport,
			Help: "The file is streamed to the daemon, checked with qemu-img (qcow2, raw or raw LUKS; no backing\n" +
				"file) and kept with a JSON sidecar of its properties. Properties that ask for ephemeral storage\n" +
				"encryption: hw_ephemeral_encryption (a boolean: true/false, yes/no, on/off, 1/0, any case) and\n" +
				"hw_ephemeral_encryption_format (luks, luksv2, plain); an encrypted image names its secret in\n" +
				"os_encrypt_key_id, with os_encrypt_format, os_encrypt_cipher, os_encrypt_key_deletion_policy,\n" +
				"os_decrypt_container_format and os_decrypt_size. Other properties are kept as given."},
		{Name: "image list", Summary: "list the host's images", Client: true, Setup: noFlags(imageList)},
		{Name: "image show", Args: "NAME", Summary: "show an image with its properties", Client: true, Setup: noFlags(imageShow)},
		{Name: "image delete", Args: "NAME", Summary: "delete an image no instance uses", Client: true, Setup: noFlags(imageDelete)},
	}
}

func imageImport(fs *flag.FlagSet) func(context.Context, *Call) error {
	name := fs.String("name", "", "the image's name (required)")
	props := propertyFlag(fs, "a property KEY=VALUE (repeatable)")
	return func(ctx context.Context, c *Call) error {
		file, err := c.OneName()
		if err != nil {
			return err
		}
		if *name == "" {
			return Usagef("image import needs --name")
		}
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		// The image is streamed to the daemon, never held here; a device
		// or a pipe (/dev/zero) may have no end, and the daemon would
		// write it until its disk is full.
		if fi, err := f.Stat(); err != nil {
			return err
		} else if !fi.Mode().IsRegular() {
			return Usagef("image import: %s is not a regular file (%s): import an image file", file, fi.Mode().Type())
		}
		img, err := c.Client().ImportImage(ctx, *name, props, f)
		if err != nil {
			return err
		}
		return printImage(c, img)
	}
}

func imageList(ctx context.Context, c *Call) error {
	if err := c.NoArgs(); err != nil {
		return err
	}
	imgs, err := c.Client().Images(ctx)
	if err != nil {
		return err
	}
	return printList(c, orEmpty(imgs), "NAME\tFORMAT\tVIRTUAL SIZE\tENCRYPTED\tFILE\tPROPERTIES", imgs, func(i types.Image) string {
		props := joinProps(i.Properties)
		if i.Legacy {
			props = "(no sidecar)"
		}
		return fmt.Sprintf("%s\t%s\t%d\t%t\t%s\t%s", i.Name, i.Format, i.VirtualSize, i.Encrypted, i.File, orDash(props))
	})
}

func imageShow(ctx context.Context, c *Call) error {
	name, err := c.OneName()
	if err != nil {
		return err
	}
	img, err := c.Client().Image(ctx, name)
	if err != nil {
		return err
	}
	return printImage(c, img)
}

func printImage(c *Call, i types.Image) error {
	if c.JSON() {
		return c.PrintJSON(i)
	}
	tw := newTable(c.Stdout)
	created := "-"
	if !i.Created.IsZero() {
		created = i.Created.UTC().Format(time.RFC3339)
	}
	writeFields(tw, [][2]string{
		{"Name", i.Name}, {"File", i.File}, {"Format", i.Format}, {"Virtual size", fmt.Sprintf("%d bytes", i.VirtualSize)},
		{"Size", fmt.Sprintf("%d bytes", i.Size)}, {"Encrypted", fmt.Sprint(i.Encrypted)}, {"SHA-256", orDash(i.Checksum)},
		{"Created", created},
	})
	if i.Legacy {
		fmt.Fprintf(tw, "Properties:\t(none: a file put into the image directory by hand)\n")
	} else {
		printProps(tw, "Properties", i.Properties)
	}
	return tw.Flush()
}

func imageDelete(ctx context.Context, c *Call) error {
	name, err := c.OneName()
	if err != nil {
		return err
	}
	if err := c.Client().DeleteImage(ctx, name); err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "image %s deleted\n", name)
	return nil
}
