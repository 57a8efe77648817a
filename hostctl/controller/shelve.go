package controller

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
// go: the domain is undefined, the instance directory (disks, config
// drive, console log) removed, the libvirt secrets undefined. The
// instance record, its published metadata, its DHCP leases, its
// block-device records and its key-manager secrets stay; the instance is
// StateShelved (vmstate.go).
//
// Unshelve makes the disks again: the root disk a standalone qcow2
// copied from the shelved image, encrypted under the same secret and
// proven to open with it; every other disk blank again as the flavor or
// the spec makes it (ephemeral disks hold nothing across a shelve), an
// encrypted one under its existing secret. It defines the domain, hands
// libvirt the passphrases and starts it; then the shelved image is
// deleted (its secret is the root disk's: it stays). A root disk that was
// an overlay of an encrypted image is flat after the unshelve: the
// instance's copy of the image's secret is no longer used and is deleted.
//
// Every step of both is undone when a later one fails; no secret is
// deleted before the operation has succeeded.

import (
	"context"
	"fmt"
	"github.com/vmeta/vmeta/hostctl/part"
	"os"
	"path/filepath"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// ShelvedImageName is the catalog image a shelve of instance name makes.
func ShelvedImageName(name string) string { return name + "-shelved" }

// rootIndex is the index of the instance's root disk (the first disk when
// none is made from an image), -1 when it has no disk.
func rootIndex(in *model.Instance) int {
	root := rootDisk(in)
	if root < 0 && len(in.Disks) > 0 {
		root = 0
	}
	return root
}

// Shelve shelves the stopped instance name (see the top of this file).
func (c *Controller) Shelve(ctx context.Context, name string) (_ *Instance, err error) {
	defer c.observe("shelve", time.Now(), &err)
	unlock := c.locks.Lock(name)
	rec, in, err := c.stoppedInstance(ctx, "shelve", name)
	if err == nil {
		err = c.checkRecordParts(ctx, part.Shelve, rec) // parts.go
	}
	if err != nil {
		unlock()
		return nil, err
	}
	if err := c.shelveLocked(ctx, in); err != nil {
		unlock()
		return nil, fmt.Errorf("shelve %s: %w", name, err)
	}
	unlock()
	c.log.Info("instance shelved", "name", name, "uuid", rec.UUID, "image", ShelvedImageName(name))
	c.emit(ctx, StreamInstances, "instance.shelved", map[string]string{"name": name, "uuid": rec.UUID, "image": ShelvedImageName(name)})
	return c.Get(ctx, name)
}

func (c *Controller) shelveLocked(ctx context.Context, in *model.Instance) (err error) {
	if c.domains == nil {
		return fmt.Errorf("%w: this host runs without a hypervisor (--virt none) and made no disk to keep", ErrState)
	}
	if c.records == nil {
		return errNoRecords
	}
	root := rootIndex(in)
	if root < 0 {
		return fmt.Errorf("%w: the instance has no disk", ErrState)
	}
	bds, _, err := c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	req := SnapshotRequest{Image: ShelvedImageName(in.Name), EncryptionKey: SnapshotKeyNone}
	if bd := bds.Disks[in.Disks[root].Name]; bd.Encrypted {
		// The root disk's own secret, under its own UUID.
		req.EncryptionKey, req.SecretUUID = SnapshotKeyExisting, bd.EncryptionSecretUUID
	}
	if err := checkSnapshot(&req); err != nil {
		return err
	}

	r := revert.New(c.log, "shelve "+in.Name)
	defer r.Fail(&err)
	img, err := c.snapshotRoot(ctx, r, in, req, false)
	if err != nil {
		return err
	}
	if err := c.putVMState(ctx, r, in.UUID, vmState{Instance: in.Name, State: StateShelved, ShelvedImage: img.Name}); err != nil {
		return err
	}
	if err := c.removeDomain(ctx, r, in); err != nil {
		return err
	}
	// The parts give back what the instance held on this host (its
	// passthrough devices), undone with the rest on failure.
	if err := c.prepareParts(ctx, part.Shelve, r, in, &virt.Host{}); err != nil { // parts.go
		return err
	}
	// The instance's files move aside in one rename, back on failure.
	dir := c.instanceDir(in.Name)
	aside := filepath.Join(c.dataDir, "instances", ".shelved-"+in.Name)
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
		c.log.Warn("files of a shelved instance not removed", "name", in.Name, "dir", aside, "err", err)
	}
	c.pruneMedia(in.Name, "")
	// A stopped domain's passphrases are not in libvirt; any left by a
	// crash go now (the reconciler would sweep them too).
	if err := c.undefineSecrets(ctx, in.UUID); err != nil {
		c.log.Warn("libvirt secrets of a shelved instance not undefined (the reconciler retries)", "name", in.Name, "err", err)
	}
	return nil
}

// Unshelve brings a shelved instance back and starts it (see the top of
// this file).
func (c *Controller) Unshelve(ctx context.Context, name string) (_ *Instance, err error) {
	defer c.observe("unshelve", time.Now(), &err)
	unlock := c.locks.Lock(name)
	rec, err := c.ownRecord(ctx, "unshelve", name)
	if err != nil {
		unlock()
		return nil, err
	}
	if err := c.drv.require("unshelve", name); err != nil {
		unlock()
		return nil, err
	}
	if err := c.checkRecordParts(ctx, part.Unshelve, rec); err != nil { // parts.go
		unlock()
		return nil, err
	}
	st, ver, err := c.vmStateOf(ctx, rec.UUID)
	if err == nil && st.State != StateShelved {
		state := st.State
		if state == "" {
			state = c.drv.state(ctx, name, rec.UUID)
		}
		err = fmt.Errorf("%w: the instance is not shelved (state %s)", ErrState, state)
	}
	var unused []string
	if err == nil {
		unused, err = c.unshelveLocked(ctx, rec.UUID, st, ver)
	}
	unlock()
	if err != nil {
		return nil, fmt.Errorf("unshelve %s: %w", name, err)
	}
	if err := c.imageDir.Delete(ctx, st.ShelvedImage, nil); err != nil {
		c.log.Warn("shelved image of an unshelved instance not deleted", "name", name, "image", st.ShelvedImage, "err", err)
	} else {
		c.emit(ctx, StreamImages, "image.deleted", map[string]string{"name": st.ShelvedImage})
	}
	c.deleteSecrets(ctx, &model.Instance{Name: name, UUID: rec.UUID}, unused)
	c.log.Info("instance unshelved", "name", name, "uuid", rec.UUID)
	c.emit(ctx, StreamInstances, "instance.unshelved", map[string]string{"name": name, "uuid": rec.UUID})
	return c.Get(ctx, name)
}

// unshelveLocked makes the disks and the domain of the shelved instance
// uuid again and starts it; it returns the secrets no disk uses any more
// (a flattened root disk's backing copy), to delete after the commit.
func (c *Controller) unshelveLocked(ctx context.Context, uuid string, st vmState, ver int64) (_ []string, err error) {
	rec, err := c.store.Instance(ctx, st.Instance)
	if err != nil {
		return nil, err
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return nil, err
	}
	defer c.imageDir.Use(st.ShelvedImage)()
	img, err := c.imageDir.Lookup(ctx, st.ShelvedImage)
	if err != nil {
		return nil, fmt.Errorf("shelved image %s: %w", st.ShelvedImage, err)
	}
	if cur, err := c.currentDomain(ctx, in.Name); err != nil {
		return nil, err
	} else if cur != nil {
		return nil, fmt.Errorf("%w: libvirt has a domain %s (uuid %s) already; hostctl does not take it over", ErrState, in.Name, cur.uuid)
	}
	plans, err := c.planDisks(ctx, in)
	if err != nil {
		return nil, err
	}
	bds, _, err := c.loadBlockDevices(ctx, uuid)
	if err != nil {
		return nil, err
	}
	rootName := ""
	if i := rootIndex(in); i >= 0 {
		rootName = in.Disks[i].Name
	}

	r := revert.New(c.log, "unshelve "+in.Name)
	defer r.Fail(&err)
	if err := c.mkdirInstance(r, c.instanceDir(in.Name)); err != nil {
		return nil, err
	}
	upd := map[string]*encryption.BlockDevice{}
	var unused []string
	for _, p := range plans {
		r.Add("remove disk image "+p.Path, func(context.Context) error { return removeFile(p.Path) })
		bd, had := bds.Disks[p.target]
		switch {
		case p.target == rootName:
			if err := c.restoreRoot(ctx, p, bd, img.Path); err != nil {
				return nil, err
			}
			if had && bd.BackingEncryptionSecretUUID != "" {
				// Flat now: no backing file, no backing secret.
				unused = append(unused, bd.BackingEncryptionSecretUUID)
				bd.BackingEncryptionSecretUUID = ""
				upd[p.target] = &bd
			}
		case had && bd.Encrypted:
			if err := c.recreateEncrypted(ctx, p, bd); err != nil {
				return nil, err
			}
		default:
			if err := c.images.Create(ctx, p.Disk); err != nil {
				return nil, fmt.Errorf("create disk %s: %w", p.target, err)
			}
		}
	}
	if err := c.updateBlockDevices(ctx, r, in, upd); err != nil {
		return nil, err
	}
	host := c.host(in)
	if err := c.encryptedSources(ctx, in, &host); err != nil {
		return nil, err
	}
	was := clone(in)
	if err := c.prepareParts(ctx, part.Unshelve, r, in, &host); err != nil { // parts.go
		return nil, err
	}
	// A part completed the spec (passthrough devices claimed again are
	// other devices): the domain gets the new spec, which is published
	// once the unshelve stands.
	republish := !sameSpec(was, in)
	doc, err := virt.BuildDomain(in, host, c.dom)
	if err != nil {
		return nil, err
	}
	if _, err := c.domains.Define(ctx, doc); err != nil {
		return nil, err
	}
	r.Add("remove domain "+in.Name, func(ctx context.Context) error { return c.domains.Remove(ctx, in.Name) })
	if republish {
		if _, err := c.readBack(ctx, in); err != nil {
			return nil, err
		}
	}
	if err := c.dropVMState(ctx, r, uuid, st, ver); err != nil {
		return nil, err
	}
	// Config drive (rebuilt from the published metadata), shares,
	// passphrases, start; a failed start takes its secrets back.
	if err := c.startDomain(ctx, rec); err != nil {
		return nil, err
	}
	r.Success()
	if republish {
		pr := revert.New(c.log, "publish unshelved "+in.Name)
		var perr error
		defer pr.Fail(&perr)
		if _, perr = c.publish(ctx, pr, in, rec.Revision); perr != nil {
			return unused, fmt.Errorf("unshelved, but the spec the parts completed was not published (apply it again): %w", perr)
		}
	}
	return unused, nil
}

// restoreRoot copies the shelved image at src into the root disk of plan
// p: encrypted under the disk's own secret (bd) when it was, read back
// and proven to open with it.
func (c *Controller) restoreRoot(ctx context.Context, p diskPlan, bd encryption.BlockDevice, src string) error {
	var pass []byte
	if bd.Encrypted {
		if c.keys == nil {
			return fmt.Errorf("%w: disk %s is encrypted and this host has no key manager", ErrState, p.target)
		}
		var err error
		if pass, err = c.keys.Passphrase(ctx, bd.EncryptionSecretUUID); err != nil {
			return fmt.Errorf("disk %s: %w", p.target, err)
		}
		defer clear(pass)
	}
	if err := c.luks.Convert(ctx, p.Path, encryption.Source{Path: src, Pass: pass}, pass); err != nil {
		return fmt.Errorf("disk %s from the shelved image: %w", p.target, err)
	}
	if pass == nil {
		return nil
	}
	return c.checkLUKS(ctx, p.target, p.Path, pass)
}

// recreateEncrypted makes the disk of plan p again, blank, encrypted
// under its existing secret (bd).
func (c *Controller) recreateEncrypted(ctx context.Context, p diskPlan, bd encryption.BlockDevice) error {
	if c.keys == nil {
		return fmt.Errorf("%w: disk %s is encrypted and this host has no key manager", ErrState, p.target)
	}
	pass, err := c.keys.Passphrase(ctx, bd.EncryptionSecretUUID)
	if err != nil {
		return fmt.Errorf("disk %s: %w", p.target, err)
	}
	defer clear(pass)
	d := encryption.Disk{Path: p.Path, Size: p.Size}
	if p.Base != nil {
		d.Base = &encryption.Base{Path: p.Base.Path, Format: p.Base.Format}
	}
	if err := c.luks.Create(ctx, d, pass); err != nil {
		return fmt.Errorf("create encrypted disk %s: %w", p.target, err)
	}
	return c.checkLUKS(ctx, p.target, p.Path, pass)
}

// checkLUKS reads the LUKS header of disk's image at path back and proves
// pass opens it.
func (c *Controller) checkLUKS(ctx context.Context, disk, path string, pass []byte) error {
	info, err := c.luks.Inspect(ctx, path)
	if err != nil {
		return fmt.Errorf("disk %s: %w", disk, err)
	}
	if !info.Encrypted || info.EncryptFormat != encryption.FormatLUKS {
		return fmt.Errorf("disk %s: qemu-img info reads no LUKS header (encrypted=%t, format %q)", disk, info.Encrypted, info.EncryptFormat)
	}
	if err := c.luks.Verify(ctx, path, pass, nil); err != nil {
		return fmt.Errorf("disk %s: its passphrase does not open it: %w", disk, err)
	}
	return nil
}
