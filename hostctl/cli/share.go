package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

const shareHelp = `A share is a host directory under the share root (--proto local), an
NFS export host:/path or [IPv6]:/path (--proto nfs), or a CephFS export
MON[,MON...]:/PATH (--proto cephfs, --fs NAME for a file system other than
the default; mounted with ceph-fuse as this host's CephX client, see
hostctl share ceph-auth) that hostctl mounts on the host while an instance
using it runs. Shares are attached to and
detached from SHUTOFF instances; the guest mounts each one with
mount -t virtiofs TAG DIR (vmeta-agent: /mnt/shares/TAG). A share
attached to any instance is locked: it cannot be deleted.`

// shareCommands are `hostctl share create|list|show|delete|attach|detach|mappings`.
func shareCommands() []*Command {
	return []*Command{
		{Name: "share create", Args: "--proto local|nfs|cephfs --export LOCATION [--fs NAME] --project P [--name N] [--id UUID]", Summary: "add a share to the registry", Help: shareHelp, Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				var req types.ShareCreateRequest
				cephFS := fs.String("fs", "", "the CephFS file system (--proto cephfs; the cluster's default when empty)")
				fs.StringVar(&req.ID, "id", "", "the share's UUID (generated when empty)")
				fs.StringVar(&req.Proto, "proto", "", "local (a directory under the share root), nfs (host:/path) or cephfs (MON[,MON...]:/PATH)")
				fs.StringVar(&req.ExportLocation, "export", "", "the directory or the NFS export")
				fs.StringVar(&req.ProjectID, "project", "", "the project that owns the share")
				fs.StringVar(&req.Name, "name", "", "a name for people")
				return func(ctx context.Context, c *Call) error {
					if err := c.NoArgs(); err != nil {
						return err
					}
					if req.Proto == "" || req.ExportLocation == "" || req.ProjectID == "" {
						return Usagef("share create needs --proto, --export and --project")
					}
					if *cephFS != "" {
						if req.Proto != "cephfs" {
							return Usagef("--fs is for --proto cephfs")
						}
						req.ExportLocation += ",fs=" + *cephFS
					}
					sh, err := c.Client().CreateShare(ctx, req)
					if err != nil {
						return err
					}
					if c.JSON() {
						return c.PrintJSON(types.ShareBody{Share: sh})
					}
					fmt.Fprintf(c.Stdout, "share %s created\n", sh.ID)
					return nil
				}
			}},
		{Name: "share ceph-auth", Args: "--admin-keyring FILE --mon MON[,MON...]", Summary: "give this host the Ceph admin keyring it manages its CephX client (client.vmeta-HOST.GEN) with", Help: cephAuthHelp, Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				file := fs.String("admin-keyring", "", "the admin keyring file (mode 0600 or 0400; [client.admin] key = ...)")
				mons := fs.String("mon", "", "the monitors, host[:port] separated by commas")
				return func(ctx context.Context, c *Call) error {
					if err := c.NoArgs(); err != nil {
						return err
					}
					if *file == "" || *mons == "" {
						return Usagef("share ceph-auth needs --admin-keyring and --mon")
					}
					kr, err := readAdminKeyring(*file)
					if err != nil {
						return err
					}
					out, err := c.Client().CephAuth(ctx, types.CephAuthRequest{AdminKeyring: string(kr), Mons: *mons})
					clear(kr)
					if err != nil {
						return err
					}
					if c.JSON() {
						return c.PrintJSON(out)
					}
					fmt.Fprintf(c.Stdout, "CephX admin keyring accepted (Ceph %s); this host mounts CephFS shares as %s\n", out.CephVersion, out.Client)
					return nil
				}
			}},
		{Name: "share list", Summary: "list the shares", Client: true, Setup: noFlags(shareList)},
		{Name: "share show", Args: "SHARE", Summary: "show one share, with the instances that lock it", Client: true, Setup: noFlags(shareShow)},
		{Name: "share delete", Args: "SHARE", Summary: "remove a share from the registry (refused while it is attached)", Client: true, Setup: noFlags(shareDelete)},
		{Name: "share attach", Args: "INSTANCE SHARE [--tag T] [--live]", Summary: "attach a share to a SHUTOFF instance", Help: shareHelp, Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				tag := fs.String("tag", "", "the virtiofs mount tag (the share's UUID when empty)")
				live := fs.Bool("live", false, "hot-plug into a running instance (one that booted with shared memory; beyond the specification)")
				return func(ctx context.Context, c *Call) error {
					inst, id, err := twoArgs(c, "INSTANCE SHARE")
					if err != nil {
						return err
					}
					m, err := c.Client().AttachShare(ctx, inst, types.ServerShareAttach{ShareID: id, Tag: *tag, Live: *live})
					if err != nil {
						return err
					}
					if c.JSON() {
						return c.PrintJSON(types.ServerShareBody{Share: m})
					}
					fmt.Fprintf(c.Stdout, "share %s attached to %s as tag %s (%s)\n", m.ShareID, inst, m.Tag, m.Status)
					return nil
				}
			}},
		{Name: "share detach", Args: "INSTANCE SHARE [--live]", Summary: "detach a share from a SHUTOFF (or ERROR) instance", Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				live := fs.Bool("live", false, "hot-unplug from a running instance (the guest must release it; beyond the specification)")
				return func(ctx context.Context, c *Call) error {
					inst, id, err := twoArgs(c, "INSTANCE SHARE")
					if err != nil {
						return err
					}
					m, err := c.Client().DetachShare(ctx, inst, id, *live)
					if err != nil {
						return err
					}
					if c.JSON() {
						return c.PrintJSON(types.ServerShareBody{Share: m})
					}
					fmt.Fprintf(c.Stdout, "share %s detached from %s\n", m.ShareID, inst)
					return nil
				}
			}},
		{Name: "share mappings", Args: "INSTANCE", Summary: "list the shares attached to an instance, with their status", Client: true,
			Setup: noFlags(func(ctx context.Context, c *Call) error {
				name, err := c.OneName()
				if err != nil {
					return err
				}
				ms, err := c.Client().ServerShares(ctx, name)
				if err != nil {
					return err
				}
				return printList(c, types.ServerSharesBody{Shares: ms}, "SHARE\tTAG\tSTATUS\tEXPORT", ms, func(m types.ShareMapping) string {
					return fmt.Sprintf("%s\t%s\t%s\t%s", m.ShareID, m.Tag, m.Status, orDash(m.ExportLocation))
				})
			})},
	}
}

func twoArgs(c *Call, what string) (string, string, error) {
	if len(c.Args) != 2 || strings.TrimSpace(c.Args[0]) == "" || strings.TrimSpace(c.Args[1]) == "" {
		return "", "", Usagef("%s takes %s", c.cmd.Name, what)
	}
	return c.Args[0], c.Args[1], nil
}

func oneShare(c *Call) (string, error) {
	if len(c.Args) != 1 || strings.TrimSpace(c.Args[0]) == "" {
		return "", Usagef("%s takes exactly one share id", c.cmd.Name)
	}
	return c.Args[0], nil
}

func shareList(ctx context.Context, c *Call) error {
	if err := c.NoArgs(); err != nil {
		return err
	}
	shs, err := c.Client().Shares(ctx)
	if err != nil {
		return err
	}
	return printList(c, types.SharesBody{Shares: shs}, "ID\tNAME\tPROJECT\tPROTO\tLOCKED BY\tEXPORT", shs, func(sh types.Share) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", sh.ID, orDash(sh.Name), sh.ProjectID, sh.Proto, orDash(strings.Join(sh.LockedBy, ",")), orDash(sh.ExportLocation))
	})
}

func shareShow(ctx context.Context, c *Call) error {
	id, err := oneShare(c)
	if err != nil {
		return err
	}
	sh, err := c.Client().Share(ctx, id)
	if err != nil {
		return err
	}
	return printFields(c, types.ShareBody{Share: sh}, [][2]string{
		{"ID", sh.ID}, {"Name", orDash(sh.Name)}, {"Project", sh.ProjectID}, {"Proto", sh.Proto},
		{"Export", orDash(sh.ExportLocation)}, {"Locked", fmt.Sprint(sh.Locked)},
		{"Locked by", orDash(strings.Join(sh.LockedBy, ", "))}, {"Created", sh.CreatedAt.UTC().Format(time.RFC3339)},
	})
}

func shareDelete(ctx context.Context, c *Call) error {
	id, err := oneShare(c)
	if err != nil {
		return err
	}
	if err := c.Client().DeleteShare(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "share %s deleted\n", id)
	return nil
}

const cephAuthHelp = `hostctl holds, per host, a CephX client of its own, client.vmeta-HOST.GEN,
whose capabilities name only the paths of the CephFS shares mapped on the
host (mon 'allow r', mds 'allow rw path=...', osd 'allow rw tag cephfs
data=FS'). It creates and changes it with the admin keyring given here,
once: the key goes to the key manager (wrapped), never to a log or a
command line. The keyring file must not be readable by group or others.
Rotate the client with hostctl keys rotate cephx (a new generation; mounts
keep theirs until their instances stop).`

// readAdminKeyring reads a keyring file that only its owner may read.
func readAdminKeyring(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("--admin-keyring: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("--admin-keyring: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, Usagef("--admin-keyring %s: not a regular file", p)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, Usagef("--admin-keyring %s: mode %04o: must not be readable or writable by group or others (chmod 600)", p, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("--admin-keyring: %w", err)
	}
	return b, nil
}
