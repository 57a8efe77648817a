package controller

// Rescue and unrescue (issue: ephemeral storage encryption, item 8), Nova's
// rescue translated to one host.
//
// Rescue (re)starts the instance from a rescue disk made from a catalog
// image: the domain is redefined with the rescue disk as its first (boot)
// disk, under the root disk's target name, and the instance's root disk
// as the second disk, its encryption unchanged; the NICs and the config
// drive stay, the other disks, shares and passthrough devices are left
// out. A running instance is shut down first (as `instance stop`, powered
// off after the request's timeout, DefaultStopTimeout when 0).
//
// The rescue disk (instances/<name>/disk.rescue) is a qcow2 overlay of
// the image. It is encrypted if and only if the image is (the
// specification: no unencrypted data at rest made from encrypted data):
// an encrypted image's rescue disk is a LUKS overlay under the image's
// passphrase, its backing file opened with the same passphrase. As the
// specification says, the rescue image's own key-manager secret is used:
// no secret is created or deleted in the key manager. Only a new libvirt
// secret (a UUID of its own, usage vmeta/<key id>/<instance>/_rescue)
// carries the passphrase to QEMU, defined for the rescue and undefined at
// unrescue. The instance's state record names the image's secret
// (RescueSecret) for the whole rescue, so the secret cannot be deleted
// meanwhile (secretuse.go), nor the image (shelvedUsing).
//
// The persistent definition before the rescue is kept in the instance's
// state record (vmstate.go). Unrescue powers the rescue domain off,
// restores that definition, removes the rescue disk and its libvirt
// secret, and starts the instance. Every step of both is undone when a
// later one fails. (A rescue begun by an older hostctl, with a copy of
// the image's secret in a block-device record under rescueDisk, is
// ended the same way and the copy deleted.)

import (
	"context"
	"errors"
	"fmt"
	"github.com/vmeta/vmeta/hostctl/part"
	"path/filepath"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// RescueRequest is a rescue's parameters.
type RescueRequest = types.RescueRequest

// rescueDisk is the block-device record key of the rescue disk (no disk
// name: a target name has no underscore).
const rescueDisk = "_rescue"

const rescueFile = "disk.rescue"

// checkRescue validates a request (400s naming field, value and rule).
func checkRescue(req RescueRequest) error {
	if req.Image == "" {
		return &model.SpecError{Errors: []model.FieldError{{Field: "image", Rule: "is required (the rescue image)"}}, Of: "rescue request"}
	}
	if err := images.CheckName(req.Image); err != nil {
		return &model.SpecError{Errors: []model.FieldError{{Field: "image", Value: req.Image, Rule: err.Error()}}, Of: "rescue request"}
	}
	if req.TimeoutSeconds < 0 {
		return &model.SpecError{Errors: []model.FieldError{{Field: "timeout_seconds", Value: req.TimeoutSeconds, Rule: "must not be negative"}}, Of: "rescue request"}
	}
	return nil
}

// Rescue boots the instance name from a rescue disk made from
// req.Image (see the top of this file).
func (c *Controller) Rescue(ctx context.Context, name string, req RescueRequest) (_ *Instance, err error) {
	defer c.observe("rescue", time.Now(), &err)
	if err := checkRescue(req); err != nil {
		return nil, fmt.Errorf("rescue %s: %w", name, err)
	}
	unlock := c.locks.Lock(name)
	err = c.rescueLocked(ctx, name, req)
	unlock()
	if err != nil {
		return nil, err
	}
	c.log.Info("instance rescued", "name", name, "image", req.Image)
	c.emit(ctx, StreamInstances, "instance.rescued", map[string]string{"name": name, "image": req.Image})
	return c.Get(ctx, name)
}

func (c *Controller) rescueLocked(ctx context.Context, name string, req RescueRequest) (err error) {
	rec, err := c.ownRecord(ctx, "rescue", name)
	if err != nil {
		return err
	}
	if err := c.drv.require("rescue", name); err != nil {
		return err
	}
	if err := c.refuseVMState(ctx, "rescue", rec); err != nil {
		return err
	}
	if c.records == nil {
		return fmt.Errorf("rescue %s: %w", name, errNoRecords)
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	if err := c.checkParts(ctx, part.Rescue, in); err != nil { // parts.go
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	root := rootIndex(in)
	if root < 0 {
		return fmt.Errorf("rescue %s: %w: the instance has no disk to rescue", name, ErrState)
	}
	cur, err := c.requireDomain(ctx, name, rec.UUID)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	defer c.imageDir.Use(req.Image)()
	img, err := c.imageDir.Get(ctx, req.Image)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	base, err := c.images.Lookup(ctx, req.Image)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	plan := diskPlan{target: rescueDisk, image: img.Name, encrypt: img.Encrypted,
		Disk: images.Disk{Path: filepath.Join(c.instanceDir(name), rescueFile), Base: &base}}
	if img.Encrypted {
		if err := c.checkRescueImage(ctx, in, img); err != nil {
			return fmt.Errorf("rescue %s: %w", name, err)
		}
	}
	rin, host, err := c.rescueDomain(ctx, in, root, img.Encrypted)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}

	r := revert.New(c.log, "rescue "+name)
	defer r.Fail(&err)
	if cur.running {
		timeout := time.Duration(req.TimeoutSeconds * float64(time.Second))
		if timeout <= 0 {
			timeout = DefaultStopTimeout
		}
		if _, err := c.shutdown(ctx, name, timeout); err != nil {
			return fmt.Errorf("rescue %s: %w", name, err)
		}
		r.Add("start "+name+" again", func(ctx context.Context) error { return c.startWithSecrets(ctx, rec) })
		if err := c.undefineSecrets(ctx, rec.UUID); err != nil {
			return fmt.Errorf("rescue %s: %w", name, err)
		}
	}
	rk, err := c.makeRescueDisk(ctx, r, plan, img)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	if rk.keyID != "" {
		src := host.Disks[in.Disks[root].Name]
		src.SecretUUID = rk.libvirtUUID
		src.Backing = &virt.BackingSource{Path: base.Path, Format: base.Format, SecretUUID: rk.libvirtUUID}
		host.Disks[in.Disks[root].Name] = src
	}
	if err := c.putVMState(ctx, r, rec.UUID, vmState{Instance: name, State: StateRescue, RescueImage: img.Name, Domain: cur.inactive,
		RescueSecret: rk.keyID, RescueLibvirtSecret: rk.libvirtUUID}); err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	if err := c.prepareParts(ctx, part.Rescue, r, in, &host); err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	doc, err := virt.BuildDomain(rin, host, c.dom)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	if _, err := c.domains.Define(ctx, doc); err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	prev := cur.inactive
	r.Add("redefine domain "+name, func(ctx context.Context) error { _, err := c.domains.Define(ctx, prev); return err })
	if err := c.ensureDrive(ctx, rec); err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	if err := c.defineSecrets(ctx, r, in); err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	if rk.keyID != "" {
		if err := c.defineRescueSecret(ctx, r, in, rk); err != nil {
			return fmt.Errorf("rescue %s: %w", name, err)
		}
	}
	if err := c.domains.Start(ctx, name); err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	r.Success()
	return nil
}

// checkRescueImage refuses an encrypted rescue image whose secret this
// host cannot use for the instance (409 naming the image): no key
// manager, no os_encrypt_key_id, a secret missing or of another project.
func (c *Controller) checkRescueImage(ctx context.Context, in *model.Instance, img images.Image) error {
	keyID := img.Properties[policy.ImageEncryptKeyID]
	conflict := func(rule string) error {
		return &encryptionConflict{se: &model.SpecError{Errors: []model.FieldError{{Field: "image", Value: img.Name, Rule: rule}}}}
	}
	switch {
	case c.keys == nil:
		return conflict("the image is encrypted and this host has no key manager")
	case keyID == "":
		return conflict("qemu-img finds the image encrypted but it names no secret in " + policy.ImageEncryptKeyID)
	}
	sec, err := c.keys.Get(ctx, keyID)
	switch {
	case errors.Is(err, keys.ErrNotFound):
		return conflict(fmt.Sprintf("its secret %s=%s is not in the key manager", policy.ImageEncryptKeyID, keyID))
	case err != nil:
		return fmt.Errorf("secret of image %s: %w", img.Name, err)
	case sec.ProjectID != in.ProjectID:
		return conflict(fmt.Sprintf("its secret %s belongs to project %q and the instance to project %q: the instance's project may not read it", keyID, sec.ProjectID, in.ProjectID))
	}
	return nil
}

// rescueDomain is the instance as the rescue domain has it — the rescue
// disk under the root disk's target name, the root disk as the next
// target of its bus, no other disk, share or passthrough device — and the
// host files (the rescue disk's encryption is set by the caller).
func (c *Controller) rescueDomain(ctx context.Context, in *model.Instance, root int, encrypted bool) (*model.Instance, virt.Host, error) {
	rd := in.Disks[root]
	second, err := nextTarget(rd.Name)
	if err != nil {
		return nil, virt.Host{}, err
	}
	orig := c.host(in)
	if err := c.encryptedSources(ctx, in, &orig); err != nil {
		return nil, virt.Host{}, err
	}
	rin := clone(in)
	rescue := model.Disk{Name: rd.Name, Bus: rd.Bus, Serial: "rescue", Tag: "rescue", Encrypted: encrypted}
	moved := rd
	moved.Name, moved.Address = second, ""
	rin.Disks = []model.Disk{rescue, moved}
	rin.Shares, rin.PCIDevices = nil, nil
	host := orig
	host.ShareDirs = nil
	host.Disks = map[string]virt.DiskSource{
		rd.Name: {Path: filepath.Join("instances", in.Name, rescueFile), Format: images.DiskFormat},
		second:  orig.Disks[rd.Name],
	}
	if err := virt.Validate(rin, host, c.dom); err != nil {
		return nil, virt.Host{}, err
	}
	return rin, host, nil
}

// nextTarget is the target name after name on its bus (vda -> vdb).
func nextTarget(name string) (string, error) {
	if name == "" || name[len(name)-1] < 'a' || name[len(name)-1] >= 'z' {
		return "", fmt.Errorf("%w: the root disk's target %q has no next target name for the rescue layout", ErrState, name)
	}
	return name[:len(name)-1] + string(name[len(name)-1]+1), nil
}

// rescueKey is how an encrypted rescue disk opens: the rescue image's
// key-manager secret (keyID, the image's own) and the libvirt secret made
// for this rescue (libvirtUUID). Zero for a plain rescue disk.
type rescueKey struct {
	keyID, libvirtUUID string
}

// makeRescueDisk creates the rescue disk of plan p over image img: a
// plain overlay of a plain image, or a LUKS overlay under the image's own
// passphrase (its key-manager secret, no copy). Undo steps remove the
// file.
func (c *Controller) makeRescueDisk(ctx context.Context, r *revert.Reverter, p diskPlan, img images.Image) (rescueKey, error) {
	r.Add("remove rescue disk "+p.Path, func(context.Context) error { return removeFile(p.Path) })
	if !p.encrypt {
		if err := c.images.Create(ctx, p.Disk); err != nil {
			return rescueKey{}, fmt.Errorf("create the rescue disk: %w", err)
		}
		return rescueKey{}, nil
	}
	keyID := img.Properties[policy.ImageEncryptKeyID]
	pass, err := c.keys.Passphrase(ctx, keyID)
	if err != nil {
		return rescueKey{}, fmt.Errorf("rescue image %s: its secret %s: %w", img.Name, keyID, err)
	}
	defer clear(pass)
	d := encryption.Disk{Path: p.Path, Base: &encryption.Base{Path: p.Base.Path, Format: p.Base.Format}}
	if err := c.luks.Create(ctx, d, pass); err != nil {
		return rescueKey{}, fmt.Errorf("create the encrypted rescue disk: %w", err)
	}
	info, err := c.luks.Inspect(ctx, p.Path)
	if err != nil {
		return rescueKey{}, fmt.Errorf("rescue disk: %w", err)
	}
	if !info.Encrypted || info.EncryptFormat != encryption.FormatLUKS {
		return rescueKey{}, fmt.Errorf("rescue disk: qemu-img info reads no LUKS header (encrypted=%t, format %q)", info.Encrypted, info.EncryptFormat)
	}
	if err := c.luks.Verify(ctx, p.Path, pass, pass); err != nil {
		return rescueKey{}, fmt.Errorf("rescue disk: the image's passphrase does not open it: %w", err)
	}
	return rescueKey{keyID: keyID, libvirtUUID: keys.NewUUID()}, nil
}

// defineRescueSecret puts the rescue disk's passphrase (both layers have
// it: the rescue image's secret) into libvirt under the rescue's own
// libvirt secret; the undo step undefines it.
func (c *Controller) defineRescueSecret(ctx context.Context, r *revert.Reverter, in *model.Instance, rk rescueKey) error {
	pass, err := c.keys.Passphrase(ctx, rk.keyID)
	if err != nil {
		return fmt.Errorf("rescue disk: %w", err)
	}
	id := rk.libvirtUUID
	err = c.libvirtSecrets.DefineSecret(ctx, virt.LibvirtSecret{UUID: id, Usage: c.secretUsage(in.UUID, rescueDisk)}, pass)
	clear(pass)
	if err != nil {
		return fmt.Errorf("rescue disk: %w", err)
	}
	r.Add("undefine libvirt secret "+id, func(ctx context.Context) error { return c.libvirtSecrets.UndefineSecret(ctx, id) })
	return nil
}

// Unrescue ends a rescue: the original definition back, the rescue disk
// and its secrets gone, the instance started.
func (c *Controller) Unrescue(ctx context.Context, name string) (_ *Instance, err error) {
	defer c.observe("unrescue", time.Now(), &err)
	unlock := c.locks.Lock(name)
	uuid, copyID, err := c.unrescueLocked(ctx, name)
	unlock()
	if err != nil {
		return nil, err
	}
	if copyID != "" {
		c.deleteSecrets(ctx, &model.Instance{Name: name, UUID: uuid}, []string{copyID})
	}
	c.log.Info("instance unrescued", "name", name)
	c.emit(ctx, StreamInstances, "instance.unrescued", map[string]string{"name": name})
	return c.Get(ctx, name)
}

// unrescueLocked returns the instance's UUID and the secret copy of a
// rescue begun by an older hostctl (none now: the rescue image's own
// secret is used), to delete after the commit.
func (c *Controller) unrescueLocked(ctx context.Context, name string) (_, _ string, err error) {
	rec, err := c.ownRecord(ctx, "unrescue", name)
	if err != nil {
		return "", "", err
	}
	if err := c.checkRecordParts(ctx, part.Unrescue, rec); err != nil { // parts.go
		return "", "", err
	}
	if err := c.drv.require("unrescue", name); err != nil {
		return "", "", err
	}
	st, ver, err := c.vmStateOf(ctx, rec.UUID)
	if err != nil {
		return "", "", fmt.Errorf("unrescue %s: %w", name, err)
	}
	if st.State != StateRescue {
		state := st.State
		if state == "" {
			state = c.drv.state(ctx, name, rec.UUID)
		}
		return "", "", fmt.Errorf("unrescue %s: %w: the instance is not in rescue (state %s)", name, ErrState, state)
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return "", "", err
	}
	cur, err := c.requireDomain(ctx, name, rec.UUID)
	if err != nil {
		return "", "", fmt.Errorf("unrescue %s: %w", name, err)
	}
	bds, _, err := c.loadBlockDevices(ctx, rec.UUID)
	if err != nil {
		return "", "", err
	}
	// The rescue disk's key: the rescue image's secret (st), or the copy
	// of a rescue begun by an older hostctl (its block-device record).
	bd, legacy := bds.Disks[rescueDisk]
	rk := rescueKey{keyID: st.RescueSecret, libvirtUUID: st.RescueLibvirtSecret}
	if legacy && rk.keyID == "" {
		rk = rescueKey{keyID: bd.EncryptionSecretUUID, libvirtUUID: bd.EncryptionSecretUUID}
	}

	r := revert.New(c.log, "unrescue "+name)
	defer r.Fail(&err)
	if cur.running {
		// The rescue system is disposable: powered off at once.
		if err := c.domains.Destroy(ctx, name); err != nil {
			return "", "", fmt.Errorf("unrescue %s: %w", name, err)
		}
		r.Add("start the rescue domain "+name+" again", func(ctx context.Context) error {
			rr := revert.New(c.log, "restart rescue "+name)
			var err error
			defer rr.Fail(&err)
			if err = c.defineSecrets(ctx, rr, in); err != nil {
				return err
			}
			if rk.keyID != "" {
				if err = c.defineRescueSecret(ctx, rr, in, rk); err != nil {
					return err
				}
			}
			if err = c.domains.Start(ctx, name); err != nil {
				return err
			}
			rr.Success()
			return nil
		})
	}
	// The domain does not run: its libvirt secrets, the rescue's too, go.
	if err := c.undefineSecrets(ctx, rec.UUID); err != nil {
		return "", "", fmt.Errorf("unrescue %s: %w", name, err)
	}
	if _, err := c.domains.Define(ctx, st.Domain); err != nil {
		return "", "", fmt.Errorf("unrescue %s: restore the definition: %w", name, err)
	}
	prev := cur.inactive
	r.Add("redefine the rescue domain "+name, func(ctx context.Context) error { _, err := c.domains.Define(ctx, prev); return err })
	p := filepath.Join(c.instanceDir(name), rescueFile)
	var aside string
	if fileExists(p) {
		if aside, err = c.setAside(r, p); err != nil {
			return "", "", fmt.Errorf("unrescue %s: %w", name, err)
		}
	}
	if legacy {
		if err := c.updateBlockDevices(ctx, r, in, map[string]*encryption.BlockDevice{rescueDisk: nil}); err != nil {
			return "", "", fmt.Errorf("unrescue %s: %w", name, err)
		}
	}
	if err := c.dropVMState(ctx, r, rec.UUID, st, ver); err != nil {
		return "", "", fmt.Errorf("unrescue %s: %w", name, err)
	}
	if err := c.startDomain(ctx, rec); err != nil {
		return "", "", fmt.Errorf("unrescue %s: %w", name, err)
	}
	r.Success()
	if aside != "" {
		if err := removeFile(aside); err != nil {
			c.log.Warn("rescue disk not removed", "name", name, "file", aside, "err", err)
		}
	}
	if legacy {
		return rec.UUID, bd.EncryptionSecretUUID, nil
	}
	return rec.UUID, "", nil
}
