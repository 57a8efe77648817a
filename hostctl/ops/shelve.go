package ops

// Shelve and unshelve (issue: ephemeral storage encryption, item 8), Nova's
// shelve-offload translated to one host.
//
// Shelve takes a stopped instance (it does not stop one: stop it first)
// and snapshots its root disk, backing chain flattened, into the image
// catalog as <name>-shelved (snapshot.go). An encrypted root disk's image
// is encrypted under the root disk's own secret — the same key-manager
// secret UUID, not a copy (the specification: shelve/unshelve reuses the
// root disk's secret, so its owner does not change) — with
// os_encrypt_key_deletion_policy do_not_delete. Then the host's resources
// go: the domain is undefined, the parts give back what the instance held
// on the host (part.Shelve: passthrough devices released, shares
// stopped), the instance directory (disks, config drive, console log)
// removed, the libvirt secrets undefined. The instance record, its
// published metadata, its DHCP leases, its block-device records and its
// key-manager secrets stay; the instance is vmstate.Shelved.
//
// Unshelve makes the disks again: the root disk a standalone qcow2
// copied from the shelved image, encrypted under the same secret and
// proven to open with it; every other disk blank again as the flavor or
// the spec makes it (ephemeral disks hold nothing across a shelve), an
// encrypted one under its existing secret. The parts take back what they
// gave (part.Unshelve: passthrough devices claimed again). It defines the
// domain, hands libvirt the passphrases and starts it; then the shelved
// image is deleted (its secret is the root disk's: it stays). A root disk
// that was an overlay of an encrypted image is flat after the unshelve:
// the instance's copy of the image's secret is no longer used and is
// deleted.
//
// Every step of both is undone when a later one fails; no secret is
// deleted before the operation has succeeded.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// LibvirtSecrets is libvirt's copy of an instance's disk passphrases as
// a shelve lets go of it (the disks part, hostctl/parts/disks).
type LibvirtSecrets interface {
	UndefineSecrets(ctx context.Context, uuid string) error
}

// ShelvedImageName is the catalog image a shelve of instance name makes.
func ShelvedImageName(name string) string { return name + "-shelved" }

// Shelve shelves the stopped instance name (see the top of this file).
func (o *shelver) Shelve(ctx context.Context, name string) (_ *controller.Instance, err error) {
	defer o.frame.Observe("shelve", time.Now(), &err)
	unlock := o.frame.LockInstance(name)
	rec, in, err := instance(ctx, o.frame, "", part.Shelve, name, stopped)
	if err != nil {
		unlock()
		return nil, err
	}
	if err := o.shelveLocked(ctx, in); err != nil {
		unlock()
		return nil, fmt.Errorf("shelve %s: %w", name, err)
	}
	unlock()
	image := ShelvedImageName(name)
	o.log.Info("instance shelved", "name", name, "uuid", rec.UUID, "image", image)
	o.frame.Emit(ctx, controller.StreamInstances, "instance.shelved", map[string]string{"name": name, "uuid": rec.UUID, "image": image})
	return o.frame.Get(ctx, name)
}

func (o *shelver) shelveLocked(ctx context.Context, in *model.Instance) (err error) {
	switch hv, records := o.frame.Capabilities(); {
	case !hv:
		return fmt.Errorf("%w: this host runs without a hypervisor (--virt none) and made no disk to keep", controller.ErrState)
	case !records:
		return layout.ErrNoRecords
	}
	root := rootIndex(in)
	if root < 0 {
		return fmt.Errorf("%w: the instance has no disk", controller.ErrState)
	}
	bds, err := blockDevices(ctx, o.disks, in.UUID)
	if err != nil {
		return err
	}
	req := types.SnapshotRequest{Image: ShelvedImageName(in.Name), EncryptionKey: types.SnapshotKeyNone}
	if bd := bds[in.Disks[root].Name]; bd.Encrypted {
		// The root disk's own secret, under its own UUID.
		req.EncryptionKey, req.SecretUUID = types.SnapshotKeyExisting, bd.EncryptionSecretUUID
	}
	if err := checkSnapshot(&req); err != nil {
		return err
	}

	r := revert.New(o.log, "shelve "+in.Name)
	defer r.Fail(&err)
	img, err := o.snapshotRoot(ctx, r, in, req, false)
	if err != nil {
		return err
	}
	if err := o.states.Put(ctx, r, in.UUID, vmstate.Record{Instance: in.Name, State: vmstate.Shelved, ShelvedImage: img.Name}); err != nil {
		return err
	}
	if err := o.domains.RemoveDomain(ctx, r, in); err != nil {
		return err
	}
	// The parts give back what the instance held on this host (its
	// passthrough devices, its shares), undone with the rest on failure.
	if err := o.host.PrepareParts(ctx, part.Shelve, r, in, &virt.Host{}); err != nil {
		return err
	}
	// The instance's files move aside in one rename, back on failure.
	dir := o.files.InstanceDir(in.Name)
	aside := filepath.Join(filepath.Dir(dir), ".shelved-"+in.Name)
	if err := os.RemoveAll(aside); err != nil {
		return err
	}
	if fileExists(dir) {
		if err := os.Rename(dir, aside); err != nil {
			return err
		}
		r.Add("put back "+dir, func(context.Context) error { return os.Rename(aside, dir) })
	}
	r.Success()
	if err := os.RemoveAll(aside); err != nil {
		o.log.Warn("files of a shelved instance not removed", "name", in.Name, "dir", aside, "err", err)
	}
	// What the instance still has on the host besides its domain, its
	// files and what the parts gave back: its libvirt secrets (a stopped
	// domain's passphrases are not in libvirt: any left by a crash go
	// now; a failure is logged, the reconciler retries).
	if err := o.libvirt.UndefineSecrets(ctx, in.UUID); err != nil {
		o.log.Warn("libvirt secrets of a shelved instance not undefined (the reconciler retries)", "name", in.Name, "err", err)
	}
	return nil
}

// Unshelve brings a shelved instance back and starts it (see the top of
// this file).
func (o *shelver) Unshelve(ctx context.Context, name string) (_ *controller.Instance, err error) {
	defer o.frame.Observe("unshelve", time.Now(), &err)
	unlock := o.frame.LockInstance(name)
	rec, in, err := instance(ctx, o.frame, "", part.Unshelve, name, withHypervisor)
	if err != nil {
		unlock()
		return nil, err
	}
	st, ver, err := o.states.Require(ctx, name, rec.UUID, vmstate.Shelved)
	var unused []string
	if err == nil {
		unused, err = o.unshelveLocked(ctx, rec, in, st, ver)
	}
	unlock()
	if err != nil {
		return nil, fmt.Errorf("unshelve %s: %w", name, err)
	}
	if err := o.images.ImageDir().Delete(ctx, st.ShelvedImage, nil); err != nil {
		o.log.Warn("shelved image of an unshelved instance not deleted", "name", name, "image", st.ShelvedImage, "err", err)
	} else {
		o.frame.Emit(ctx, controller.StreamImages, "image.deleted", map[string]string{"name": st.ShelvedImage})
	}
	o.disks.DeleteSecrets(ctx, &model.Instance{Name: name, UUID: rec.UUID}, unused)
	o.log.Info("instance unshelved", "name", name, "uuid", rec.UUID)
	o.frame.Emit(ctx, controller.StreamInstances, "instance.unshelved", map[string]string{"name": name, "uuid": rec.UUID})
	return o.frame.Get(ctx, name)
}

// unshelveLocked makes the disks and the domain of the shelved instance
// in again and starts it; it returns the secrets no disk uses any more
// (a flattened root disk's backing copy), to delete after the commit.
func (o *shelver) unshelveLocked(ctx context.Context, rec store.Instance, in *model.Instance, st vmstate.Record, ver int64) (_ []string, err error) {
	dir := o.images.ImageDir()
	defer dir.Use(st.ShelvedImage)()
	img, err := dir.Lookup(ctx, st.ShelvedImage)
	if err != nil {
		return nil, fmt.Errorf("shelved image %s: %w", st.ShelvedImage, err)
	}
	if cur, err := o.frame.CurrentDomain(ctx, in.Name, ""); err != nil {
		return nil, err
	} else if cur != nil {
		return nil, fmt.Errorf("%w: libvirt has a domain %s (uuid %s) already; hostctl does not take it over", controller.ErrState, in.Name, cur.UUID)
	}
	bds, err := blockDevices(ctx, o.disks, rec.UUID)
	if err != nil {
		return nil, err
	}
	rootName := ""
	if i := rootIndex(in); i >= 0 {
		rootName = in.Disks[i].Name
	}

	r := revert.New(o.log, "unshelve "+in.Name)
	defer r.Fail(&err)
	plans, err := o.disks.Plans(ctx, in)
	if err != nil {
		return nil, err
	}
	if err := o.files.MakeInstanceDir(r, in.Name); err != nil {
		return nil, err
	}
	upd := map[string]*encryption.BlockDevice{}
	var unused []string
	for _, p := range plans {
		r.Add("remove disk image "+p.Path, func(context.Context) error { return removeFile(p.Path) })
		bd, had := bds[p.Target]
		switch {
		case p.Target == rootName:
			if err := o.restoreRoot(ctx, p, bd, img.Path); err != nil {
				return nil, err
			}
			if had && bd.BackingEncryptionSecretUUID != "" {
				// Flat now: no backing file, no backing secret.
				unused = append(unused, bd.BackingEncryptionSecretUUID)
				bd.BackingEncryptionSecretUUID = ""
				upd[p.Target] = &bd
			}
		case had && bd.Encrypted:
			if err := o.recreateEncrypted(ctx, p, bd); err != nil {
				return nil, err
			}
		default:
			if err := o.images.DiskImages().Create(ctx, p.Disk); err != nil {
				return nil, fmt.Errorf("create disk %s: %w", p.Target, err)
			}
		}
	}
	if err := o.disks.UpdateBlockDevices(ctx, r, in, upd); err != nil {
		return nil, err
	}
	host, dom, err := o.domains.DomainHost(ctx, in)
	if err != nil {
		return nil, err
	}
	was := in.Clone()
	if err := o.host.PrepareParts(ctx, part.Unshelve, r, in, &host); err != nil {
		return nil, err
	}
	// A part completed the spec (passthrough devices claimed again are
	// other devices): the domain gets the new spec, which is published
	// once the unshelve stands.
	republish := !sameSpec(was, in)
	doc, err := virt.BuildDomain(in, host, dom)
	if err != nil {
		return nil, err
	}
	if err := o.domains.DefineDomain(ctx, r, in.Name, doc, nil); err != nil {
		return nil, err
	}
	if republish {
		if err := o.domains.ReadBack(ctx, in); err != nil {
			return nil, err
		}
	}
	// No longer shelved; config drive (rebuilt from the published
	// metadata), shares, passphrases, start; a failed start takes its
	// secrets back.
	if err := o.states.Drop(ctx, r, rec.UUID, st, ver); err != nil {
		return nil, err
	}
	if err := o.domains.Resume(ctx, rec); err != nil {
		return nil, err
	}
	r.Success()
	if republish {
		pr := revert.New(o.log, "publish unshelved "+in.Name)
		var perr error
		defer pr.Fail(&perr)
		if perr = o.host.Publish(ctx, pr, in, rec.Revision); perr != nil {
			return unused, fmt.Errorf("unshelved, but the spec the parts completed was not published (apply it again): %w", perr)
		}
	}
	return unused, nil
}

// restoreRoot copies the shelved image at src into the root disk of plan
// p: encrypted under the disk's own secret (bd) when it was, read back
// and proven to open with it.
func (o *shelver) restoreRoot(ctx context.Context, p disks.Plan, bd encryption.BlockDevice, src string) error {
	km, luks := o.secrets.Encryption()
	var pass []byte
	if bd.Encrypted {
		if km == nil {
			return fmt.Errorf("%w: disk %s is encrypted and this host has no key manager", controller.ErrState, p.Target)
		}
		var err error
		if pass, err = km.Passphrase(ctx, bd.EncryptionSecretUUID); err != nil {
			return fmt.Errorf("disk %s: %w", p.Target, err)
		}
		defer clear(pass)
	}
	if err := luks.Convert(ctx, p.Path, encryption.Source{Path: src, Pass: pass}, pass); err != nil {
		return fmt.Errorf("disk %s from the shelved image: %w", p.Target, err)
	}
	if pass == nil {
		return nil
	}
	return checkLUKS(ctx, luks, p.Target, p.Path, pass, nil)
}

// recreateEncrypted makes the disk of plan p again, blank, encrypted
// under its existing secret (bd).
func (o *shelver) recreateEncrypted(ctx context.Context, p disks.Plan, bd encryption.BlockDevice) error {
	km, luks := o.secrets.Encryption()
	if km == nil {
		return fmt.Errorf("%w: disk %s is encrypted and this host has no key manager", controller.ErrState, p.Target)
	}
	pass, err := km.Passphrase(ctx, bd.EncryptionSecretUUID)
	if err != nil {
		return fmt.Errorf("disk %s: %w", p.Target, err)
	}
	defer clear(pass)
	d := encryption.Disk{Path: p.Path, Size: p.Size}
	if p.Base != nil {
		d.Base = &encryption.Base{Path: p.Base.Path, Format: p.Base.Format}
	}
	if err := luks.Create(ctx, d, pass); err != nil {
		return fmt.Errorf("create encrypted disk %s: %w", p.Target, err)
	}
	return checkLUKS(ctx, luks, p.Target, p.Path, pass, nil)
}

// checkLUKS reads the LUKS header of disk's image at path back and proves
// pass (and backing, the backing file's) opens it.
func checkLUKS(ctx context.Context, luks disks.LUKS, disk, path string, pass, backing []byte) error {
	info, err := luks.Inspect(ctx, path)
	if err != nil {
		return fmt.Errorf("disk %s: %w", disk, err)
	}
	if !info.Encrypted || info.EncryptFormat != encryption.FormatLUKS {
		return fmt.Errorf("disk %s: qemu-img info reads no LUKS header (encrypted=%t, format %q)", disk, info.Encrypted, info.EncryptFormat)
	}
	if err := luks.Verify(ctx, path, pass, backing); err != nil {
		return fmt.Errorf("disk %s: its passphrase does not open it: %w", disk, err)
	}
	return nil
}
