package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/keys"
)

// secretCommands are `hostctl secret create|list|show|delete`.
func secretCommands() []*Command {
	return []*Command{
		{Name: "secret create", Args: "[--name N] [--project P] [--payload-file FILE|-]", Summary: "create a key-manager secret (a passphrase: generated, or read from a file or standard input)", Client: true, Setup: secretCreate,
			Help: "The passphrase is never taken on the command line (ps would show it) and never printed: --payload-file reads it\n" +
				"(- for standard input; a trailing newline is kept as part of it only with --keep-newline). Without\n" +
				"--payload-file a passphrase of 32 random bytes (hex) is generated. Only the secret's metadata is shown."},
		{Name: "secret list", Summary: "list key-manager secrets (metadata only; --project P to filter)", Client: true, Setup: secretList},
		{Name: "secret show", Args: "UUID", Summary: "show a secret's metadata (never its value)", Client: true, Setup: noFlags(secretShow)},
		{Name: "secret delete", Args: "UUID", Summary: "delete a secret (refused while it is a disk's passphrase: it goes with the disk)", Client: true, Setup: noFlags(secretDelete)},
	}
}

func secretCreate(fs *flag.FlagSet) func(context.Context, *Call) error {
	name := fs.String("name", "", "the secret's name")
	project := fs.String("project", "", "the project that owns it (a member's own project when empty)")
	file := fs.String("payload-file", "", "read the passphrase from this file (- for standard input) instead of generating one")
	keepNL := fs.Bool("keep-newline", false, "keep a trailing newline of --payload-file as part of the passphrase")
	return func(ctx context.Context, c *Call) error {
		if err := c.NoArgs(); err != nil {
			return err
		}
		req := types.SecretRequest{Name: *name, ProjectID: *project}
		if *file != "" {
			// The daemon takes a passphrase of at most keys.MaxPayload
			// bytes; the file may end with a line ending besides.
			b, err := readFile(ctx, c.Stdin, "--payload-file", *file, keys.MaxPayload+2)
			if err != nil {
				return err
			}
			if !*keepNL {
				for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
					b = b[:len(b)-1]
				}
			}
			if len(b) > keys.MaxPayload {
				clear(b)
				return Usagef("--payload-file %s: %d bytes, more than the %d a passphrase may have", *file, len(b), keys.MaxPayload)
			}
			if len(b) == 0 {
				return Usagef("--payload-file %s: empty passphrase", *file)
			}
			req.Payload = b
			defer clear(b)
		}
		s, err := c.Client().CreateSecret(ctx, req)
		if err != nil {
			return err
		}
		return printSecret(c, s)
	}
}

func secretList(fs *flag.FlagSet) func(context.Context, *Call) error {
	project := fs.String("project", "", "only this project's secrets")
	return func(ctx context.Context, c *Call) error {
		if err := c.NoArgs(); err != nil {
			return err
		}
		ss, err := c.Client().Secrets(ctx, *project)
		if err != nil {
			return err
		}
		return printList(c, orEmpty(ss), "UUID\tNAME\tPROJECT\tFOR\tCREATED\tKEY", ss, func(s types.Secret) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s/%d", s.UUID, orDash(s.Name), orDash(s.ProjectID), secretFor(s),
				s.Created.UTC().Format(time.RFC3339), s.KeyID, s.KeyGeneration)
		})
	}
}

func secretFor(s types.Secret) string {
	if s.InstanceName == "" {
		return "-"
	}
	return "instance " + s.InstanceName + " disk " + s.Disk
}

func secretShow(ctx context.Context, c *Call) error {
	id, err := c.OneName()
	if err != nil {
		return err
	}
	s, err := c.Client().Secret(ctx, id)
	if err != nil {
		return err
	}
	return printSecret(c, s)
}

func printSecret(c *Call, s *types.Secret) error {
	if c.JSON() {
		return c.PrintJSON(s)
	}
	tw := newTable(c.Stdout)
	writeFields(tw, [][2]string{
		{"UUID", s.UUID}, {"Name", orDash(s.Name)}, {"Project", orDash(s.ProjectID)}, {"Type", s.Type},
		{"For", secretFor(*s)}, {"Created", s.Created.UTC().Format(time.RFC3339)},
		{"Wrapped by", fmt.Sprintf("key %s, generation %d", s.KeyID, s.KeyGeneration)},
	})
	return tw.Flush()
}

func secretDelete(ctx context.Context, c *Call) error {
	id, err := c.OneName()
	if err != nil {
		return err
	}
	if err := c.Client().DeleteSecret(ctx, id); err != nil {
		return err
	}
	if !c.JSON() {
		fmt.Fprintf(c.Stdout, "secret %s deleted\n", id)
	}
	return nil
}

// printBlockDevices prints the block-device records of an instance's
// disks (admin view; never a passphrase).
func printBlockDevices(env Env, inst *types.Instance) error {
	if len(inst.BlockDevices) == 0 {
		return nil
	}
	fmt.Fprintln(env.Stdout)
	fmt.Fprintln(env.Stdout, "Block devices (as hostctl created them):")
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "DISK\tENCRYPTED\tFORMAT\tSECRET\tBACKING SECRET\tOPTIONS")
	for _, bd := range inst.BlockDevices {
		opts := "-"
		if o := bd.EncryptionOptions; len(o) > 0 {
			opts = fmt.Sprintf("cipher=%s mode=%s hash=%s ivgen=%s key_size=%s", o["cipher"], o["mode"], o["hash"], o["ivgen"], o["key_size"])
			if o["ivgen_hash"] != "" {
				opts += " ivgen_hash=" + o["ivgen_hash"]
			}
		}
		fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\t%s\n", bd.Disk, bd.Encrypted, orDash(bd.EncryptionFormat), orDash(bd.EncryptionSecretUUID), orDash(bd.BackingEncryptionSecretUUID), opts)
	}
	return tw.Flush()
}
