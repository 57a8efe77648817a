package ops

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
// meanwhile, nor the image.
//
// The persistent definition before the rescue is kept in the instance's
// state record. Unrescue powers the rescue domain off, restores that
// definition, removes the rescue disk and its libvirt secret, and starts
// the instance. Every step of both is undone when a later one fails. (A
// rescue begun by an older hostctl, with a copy of the image's secret in
// a block-device record under disks.RescueDisk, is ended the same
// way and the copy deleted.)

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// rescueFile is the rescue disk's image file in the instance's
// directory.
const rescueFile = "disk.rescue"

// checkRescue validates a request (400s naming field, value and rule).
func checkRescue(req types.RescueRequest) error {
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
func (o *rescuer) Rescue(ctx context.Context, name string, req types.RescueRequest) (_ *controller.Instance, err error) {
	defer o.frame.Observe("rescue", time.Now(), &err)
	if err := checkRescue(req); err != nil {
		return nil, fmt.Errorf("rescue %s: %w", name, err)
	}
	unlock := o.frame.LockInstance(name)
	err = o.rescueLocked(ctx, name, req)
	unlock()
	if err != nil {
		return nil, err
	}
	o.log.Info("instance rescued", "name", name, "image", req.Image)
	o.frame.Emit(ctx, controller.StreamInstances, "instance.rescued", map[string]string{"name": name, "image": req.Image})
	return o.frame.Get(ctx, name)
}

func (o *rescuer) rescueLocked(ctx context.Context, name string, req types.RescueRequest) (err error) {
	rec, in, err := instance(ctx, o.frame, "", part.Rescue, name, withHypervisor)
	if err != nil {
		return err
	}
	if _, records := o.frame.Capabilities(); !records {
		return fmt.Errorf("rescue %s: %w", name, layout.ErrNoRecords)
	}
	root := rootIndex(in)
	if root < 0 {
		return fmt.Errorf("rescue %s: %w: the instance has no disk to rescue", name, controller.ErrState)
	}
	cur, err := o.frame.CurrentDomain(ctx, name, rec.UUID)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	dir := o.images.ImageDir()
	defer dir.Use(req.Image)()
	img, err := dir.Get(ctx, req.Image)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	base, err := o.images.DiskImages().Lookup(ctx, req.Image)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	disk := images.Disk{Path: filepath.Join(o.files.InstanceDir(name), rescueFile), Base: &base}
	if img.Encrypted {
		if err := o.checkRescueImage(ctx, in, img); err != nil {
			return fmt.Errorf("rescue %s: %w", name, err)
		}
	}
	rin, host, dom, err := o.rescueDomain(ctx, in, root, img.Encrypted)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}

	r := revert.New(o.log, "rescue "+name)
	defer r.Fail(&err)
	if cur.Running {
		timeout := time.Duration(req.TimeoutSeconds * float64(time.Second))
		if timeout <= 0 {
			timeout = controller.DefaultStopTimeout
		}
		if err := o.domains.StopDomain(ctx, r, rec, true, timeout, nil); err != nil {
			return fmt.Errorf("rescue %s: %w", name, err)
		}
	}
	rk, err := o.makeRescueDisk(ctx, r, disk, img)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	if rk.keyID != "" {
		src := host.Disks[in.Disks[root].Name]
		src.SecretUUID = rk.libvirtUUID
		src.Backing = &virt.BackingSource{Path: base.Path, Format: base.Format, SecretUUID: rk.libvirtUUID}
		host.Disks[in.Disks[root].Name] = src
	}
	if err := o.states.Put(ctx, r, rec.UUID, vmstate.Record{Instance: name, State: vmstate.Rescue, RescueImage: img.Name, Domain: cur.Inactive,
		RescueSecret: rk.keyID, RescueLibvirtSecret: rk.libvirtUUID}); err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	if err := o.host.PrepareParts(ctx, part.Rescue, r, in, &host); err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	doc, err := virt.BuildDomain(rin, host, dom)
	if err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	if err := o.domains.DefineDomain(ctx, r, name, doc, cur.Inactive); err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	if err := o.domains.Boot(ctx, r, rec, in, o.rescueSecret(in, rk)); err != nil {
		return fmt.Errorf("rescue %s: %w", name, err)
	}
	r.Success()
	return nil
}

// checkRescueImage refuses an encrypted rescue image whose secret this
// host cannot use for the instance (409 naming the image): no key
// manager, no os_encrypt_key_id, a secret missing or of another project.
func (o *rescuer) checkRescueImage(ctx context.Context, in *model.Instance, img images.Image) error {
	keyID := img.Properties[policy.ImageEncryptKeyID]
	conflict := func(rule string) error { return disks.EncryptionConflict("image", img.Name, rule) }
	km, _ := o.secrets.Encryption()
	switch {
	case km == nil:
		return conflict("the image is encrypted and this host has no key manager")
	case keyID == "":
		return conflict("qemu-img finds the image encrypted but it names no secret in " + policy.ImageEncryptKeyID)
	}
	sec, err := km.Get(ctx, keyID)
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
func (o *rescuer) rescueDomain(ctx context.Context, in *model.Instance, root int, encrypted bool) (*model.Instance, virt.Host, virt.Options, error) {
	rd := in.Disks[root]
	second, err := nextTarget(rd.Name)
	if err != nil {
		return nil, virt.Host{}, virt.Options{}, err
	}
	orig, dom, err := o.domains.DomainHost(ctx, in)
	if err != nil {
		return nil, virt.Host{}, virt.Options{}, err
	}
	rin := in.Clone()
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
	if err := virt.Validate(rin, host, dom); err != nil {
		return nil, virt.Host{}, virt.Options{}, err
	}
	return rin, host, dom, nil
}

// nextTarget is the target name after name on its bus (vda -> vdb).
func nextTarget(name string) (string, error) {
	if name == "" || name[len(name)-1] < 'a' || name[len(name)-1] >= 'z' {
		return "", fmt.Errorf("%w: the root disk's target %q has no next target name for the rescue layout", controller.ErrState, name)
	}
	return name[:len(name)-1] + string(name[len(name)-1]+1), nil
}

// rescueKey is how an encrypted rescue disk opens: the rescue image's
// key-manager secret (keyID, the image's own) and the libvirt secret made
// for this rescue (libvirtUUID). Zero for a plain rescue disk.
type rescueKey struct {
	keyID, libvirtUUID string
}

// rescueSecret is the step of a boot of the rescue domain that puts the
// rescue disk's passphrase (both layers have it: the rescue image's
// secret) into libvirt under the rescue's own libvirt secret; nil for a
// plain rescue disk.
func (o *rescuer) rescueSecret(in *model.Instance, rk rescueKey) func(context.Context, *revert.Reverter) error {
	if rk.keyID == "" {
		return nil
	}
	return func(ctx context.Context, r *revert.Reverter) error {
		if err := o.disks.DefineDiskSecret(ctx, r, in, disks.RescueDisk, rk.keyID, rk.libvirtUUID); err != nil {
			return fmt.Errorf("rescue disk: %w", err)
		}
		return nil
	}
}

// makeRescueDisk creates the rescue disk d over image img: a plain
// overlay of a plain image, or a LUKS overlay under the image's own
// passphrase (its key-manager secret, no copy). Undo steps remove the
// file.
func (o *rescuer) makeRescueDisk(ctx context.Context, r *revert.Reverter, d images.Disk, img images.Image) (rescueKey, error) {
	r.Add("remove rescue disk "+d.Path, func(context.Context) error { return removeFile(d.Path) })
	if !img.Encrypted {
		if err := o.images.DiskImages().Create(ctx, d); err != nil {
			return rescueKey{}, fmt.Errorf("create the rescue disk: %w", err)
		}
		return rescueKey{}, nil
	}
	km, luks := o.secrets.Encryption()
	keyID := img.Properties[policy.ImageEncryptKeyID]
	pass, err := km.Passphrase(ctx, keyID)
	if err != nil {
		return rescueKey{}, fmt.Errorf("rescue image %s: its secret %s: %w", img.Name, keyID, err)
	}
	defer clear(pass)
	ed := encryption.Disk{Path: d.Path, Base: &encryption.Base{Path: d.Base.Path, Format: d.Base.Format}}
	if err := luks.Create(ctx, ed, pass); err != nil {
		return rescueKey{}, fmt.Errorf("create the encrypted rescue disk: %w", err)
	}
	info, err := luks.Inspect(ctx, d.Path)
	if err != nil {
		return rescueKey{}, fmt.Errorf("rescue disk: %w", err)
	}
	if !info.Encrypted || info.EncryptFormat != encryption.FormatLUKS {
		return rescueKey{}, fmt.Errorf("rescue disk: qemu-img info reads no LUKS header (encrypted=%t, format %q)", info.Encrypted, info.EncryptFormat)
	}
	if err := luks.Verify(ctx, d.Path, pass, pass); err != nil {
		return rescueKey{}, fmt.Errorf("rescue disk: the image's passphrase does not open it: %w", err)
	}
	return rescueKey{keyID: keyID, libvirtUUID: keys.NewUUID()}, nil
}

// Unrescue ends a rescue: the original definition back, the rescue disk
// and its secrets gone, the instance started.
func (o *rescuer) Unrescue(ctx context.Context, name string) (_ *controller.Instance, err error) {
	defer o.frame.Observe("unrescue", time.Now(), &err)
	unlock := o.frame.LockInstance(name)
	uuid, copyID, err := o.unrescueLocked(ctx, name)
	unlock()
	if err != nil {
		return nil, err
	}
	if copyID != "" {
		o.disks.DeleteSecrets(ctx, &model.Instance{Name: name, UUID: uuid}, []string{copyID})
	}
	o.log.Info("instance unrescued", "name", name)
	o.frame.Emit(ctx, controller.StreamInstances, "instance.unrescued", map[string]string{"name": name})
	return o.frame.Get(ctx, name)
}

// unrescueLocked returns the instance's UUID and the secret copy of a
// rescue begun by an older hostctl (none now: the rescue image's own
// secret is used), to delete after the commit.
func (o *rescuer) unrescueLocked(ctx context.Context, name string) (_, _ string, err error) {
	rec, in, err := instance(ctx, o.frame, "", part.Unrescue, name, withHypervisor)
	if err != nil {
		return "", "", err
	}
	st, ver, err := o.states.Require(ctx, name, rec.UUID, vmstate.Rescue)
	if err != nil {
		return "", "", fmt.Errorf("unrescue %s: %w", name, err)
	}
	cur, err := o.frame.CurrentDomain(ctx, name, rec.UUID)
	if err != nil {
		return "", "", fmt.Errorf("unrescue %s: %w", name, err)
	}
	bds, err := blockDevices(ctx, o.disks, rec.UUID)
	if err != nil {
		return "", "", err
	}
	// The rescue disk's key: the rescue image's secret (st), or the copy
	// of a rescue begun by an older hostctl (its block-device record).
	bd, legacy := bds[disks.RescueDisk]
	rk := rescueKey{keyID: st.RescueSecret, libvirtUUID: st.RescueLibvirtSecret}
	if legacy && rk.keyID == "" {
		rk = rescueKey{keyID: bd.EncryptionSecretUUID, libvirtUUID: bd.EncryptionSecretUUID}
	}

	r := revert.New(o.log, "unrescue "+name)
	defer r.Fail(&err)
	// The rescue system is disposable: a running one is powered off at
	// once, undone by starting it again with its secrets, the rescue's
	// too. Then its libvirt secrets, the rescue's too, go.
	again := func(ctx context.Context) error {
		rr := revert.New(o.log, "restart rescue "+name)
		var err error
		defer rr.Fail(&err)
		if err = o.domains.Boot(ctx, rr, rec, in, o.rescueSecret(in, rk)); err != nil {
			return err
		}
		rr.Success()
		return nil
	}
	if err := o.domains.StopDomain(ctx, r, rec, cur.Running, -1, again); err != nil {
		return "", "", fmt.Errorf("unrescue %s: %w", name, err)
	}
	if err := o.domains.DefineDomain(ctx, r, name, st.Domain, cur.Inactive); err != nil {
		return "", "", fmt.Errorf("unrescue %s: restore the definition: %w", name, err)
	}
	p := filepath.Join(o.files.InstanceDir(name), rescueFile)
	var aside string
	if fileExists(p) {
		if aside, err = setAside(r, p); err != nil {
			return "", "", fmt.Errorf("unrescue %s: %w", name, err)
		}
	}
	if legacy {
		if err := o.disks.UpdateBlockDevices(ctx, r, in, map[string]*encryption.BlockDevice{disks.RescueDisk: nil}); err != nil {
			return "", "", fmt.Errorf("unrescue %s: %w", name, err)
		}
	}
	if err := o.states.Drop(ctx, r, rec.UUID, st, ver); err != nil {
		return "", "", fmt.Errorf("unrescue %s: %w", name, err)
	}
	if err := o.domains.Resume(ctx, rec); err != nil {
		return "", "", fmt.Errorf("unrescue %s: %w", name, err)
	}
	r.Success()
	if aside != "" {
		if err := removeFile(aside); err != nil {
			o.log.Warn("rescue disk not removed", "name", name, "file", aside, "err", err)
		}
	}
	if legacy {
		return rec.UUID, bd.EncryptionSecretUUID, nil
	}
	return rec.UUID, "", nil
}
