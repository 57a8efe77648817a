package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
)

// shelveCommands are `hostctl instance shelve|unshelve|rescue|unrescue`.
func shelveCommands() []*Command {
	return []*Command{
		{Name: "instance shelve", Args: "NAME", Client: true, Setup: noFlags(instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
			inst, err := c.Shelve(ctx, name)
			return inst, fmt.Sprintf("instance %s shelved (image %s-shelved)", name, name), err
		})),
			Summary: "keep a stopped instance's root disk as an image and release its domain and disk files (state shelved_offloaded)",
			Help: "The instance must be stopped (hostctl instance stop NAME first): shelve does not stop it.\n" +
				"Its root disk, backing chain flattened, becomes image NAME-shelved of the image directory; an\n" +
				"encrypted root disk's image is encrypted under the root disk's own secret (the same secret UUID,\n" +
				"os_encrypt_key_deletion_policy do_not_delete). Then its domain is undefined, its disk files,\n" +
				"config drive and console log removed and its libvirt secrets undefined. The instance record,\n" +
				"its metadata, its DHCP leases, its block-device records and its key-manager secrets stay.\n" +
				"While shelved, start, stop, reboot, apply, resize, rebuild, snapshot, rescue and hot-plug are\n" +
				"refused with 409; delete deletes the shelved image and the secrets. A failure changes nothing."},
		{Name: "instance unshelve", Args: "NAME", Client: true, Setup: noFlags(instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
			inst, err := c.Unshelve(ctx, name)
			return inst, fmt.Sprintf("instance %s unshelved", name), err
		})),
			Summary: "make a shelved instance's disks and domain again and start it",
			Help: "The root disk is copied from the shelved image, encrypted under its own secret again (the same\n" +
				"secret UUID and passphrase) and proven to open with it; the other disks are made anew and\n" +
				"blank as the flavor or the spec says (ephemeral disks hold nothing across a shelve), an\n" +
				"encrypted one under its existing secret. The domain is defined and started, then the shelved\n" +
				"image is deleted (its secret is the root disk's and stays). A failure changes nothing."},
		{Name: "instance rescue", Args: "NAME --image IMG [--timeout 30s]", Client: true, Setup: instanceRescue,
			Summary: "boot a rescue disk made from IMG, the instance's root disk attached as the second disk (state rescue)",
			Help: "A running instance is shut down first (powered off after --timeout). The domain is redefined\n" +
				"with a rescue disk, an overlay of image IMG, as its first (boot) disk under the root disk's\n" +
				"target name, and the root disk as the next target (vda -> vdb); NICs and the config drive\n" +
				"stay, other disks, shares and PCI devices are left out. The rescue disk is encrypted if and\n" +
				"only if IMG is (os_encrypt_key_id): then with the image's passphrase, handed to libvirt through\n" +
				"the instance's copy of the image's secret, whose libvirt secret is removed at unrescue.\n" +
				"A shelved or already rescued instance is refused with 409. A failure changes nothing."},
		{Name: "instance unrescue", Args: "NAME", Client: true, Setup: noFlags(instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
			inst, err := c.Unrescue(ctx, name)
			return inst, fmt.Sprintf("instance %s unrescued", name), err
		})),
			Summary: "end a rescue: power the rescue domain off, restore the original definition and start it",
			Help: "The rescue disk, its libvirt secret and its copy of the image's secret are removed; the\n" +
				"instance's own disks and secrets are untouched. A failure changes nothing."},
	}
}

func instanceRescue(fs *flag.FlagSet) func(context.Context, *Call) error {
	image := fs.String("image", "", "the rescue image (required)")
	timeout := fs.Duration("timeout", types.DefaultStopTimeout, "how long a running guest has to shut down before it is powered off")
	return instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
		if *image == "" {
			return nil, "", Usagef("instance rescue needs --image")
		}
		if *timeout <= 0 {
			return nil, "", Usagef("--timeout must be positive")
		}
		inst, err := c.Rescue(ctx, name, types.RescueRequest{Image: *image, TimeoutSeconds: timeout.Seconds()})
		return inst, fmt.Sprintf("instance %s rescued from image %s", name, *image), err
	})
}
