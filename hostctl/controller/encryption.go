package controller

// Encrypted disks (issue: ephemeral storage encryption).
//
// A spec disk's `encrypted: true` is a request. Each disk requested
// encrypted gets its own key-manager secret (internal/keys) and is created
// as a LUKS qcow2 by qemu-img (hostctl/encryption); its header is read
// back with qemu-img info and its passphrase proven by opening it. What
// was created is kept as the instance's block-device record in the store
// (blockdev/<uuid>), and only that record decides what the guest is told:
// publish renders `"encrypted": true` for exactly the disks whose record
// says so (told).
//
// While the domain runs, libvirt holds each encrypted disk's passphrase
// in a private volume secret (UUID = the key-manager secret's, usage
// vmeta/<key id>/<instance uuid>/<disk>), defined before start and
// undefined when the domain stops or is deleted; the reconciler removes
// the secrets of domains that do not run (a crash between the steps) and
// key-manager secrets and records whose instance is gone.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// KeyManager is the key manager (internal/keys) as the controller uses it.
type KeyManager interface {
	Create(ctx context.Context, req keys.Request) (keys.Secret, error)
	Get(ctx context.Context, id string) (keys.Secret, error)
	Passphrase(ctx context.Context, id string) ([]byte, error)
	Delete(ctx context.Context, id string) error
	List(ctx context.Context, project string) ([]keys.Secret, error)
	KeyID() string
}

var _ KeyManager = (*keys.Manager)(nil)

// LUKS makes and checks encrypted disk images (hostctl/encryption).
type LUKS interface {
	Create(ctx context.Context, d encryption.Disk, pass []byte) error
	Inspect(ctx context.Context, path string) (encryption.Info, error)
	Verify(ctx context.Context, path string, pass, backing []byte) error
	Resize(ctx context.Context, path string, size int64, shrink bool, pass, backing []byte) error
	Convert(ctx context.Context, dst string, src encryption.Source, pass []byte) error
	VerifyImage(ctx context.Context, path, format string, pass []byte) error
}

var _ LUKS = (*encryption.Tool)(nil)

// LibvirtSecrets hands passphrases to QEMU through libvirt (virt.Conn).
type LibvirtSecrets interface {
	DefineSecret(ctx context.Context, s virt.LibvirtSecret, value []byte) error
	UndefineSecret(ctx context.Context, uuid string) error
	Secrets(ctx context.Context, prefix string) ([]virt.LibvirtSecret, error)
}

var _ LibvirtSecrets = (*virt.Conn)(nil)

// DefaultEncryptionFormat is the format of a disk requested encrypted
// without one (Nova's [ephemeral_storage_encryption]/default_format).
const DefaultEncryptionFormat = encryption.FormatLUKS

const blockDevPrefix = "blockdev/"

// blockDevRecord is an instance's block-device records, one store record
// (its stored format is encryption's).
type blockDevRecord = encryption.BlockDevices

// ErrEncryption: a disk was requested encrypted and this host cannot
// honour the request (no key manager, an unsupported format, a change of
// an existing disk's encryption). It is a conflict (409), not a malformed
// spec, and it names the fields (errors.As finds a *model.SpecError).
var ErrEncryption = errors.New("encryption request cannot be honoured")

type encryptionConflict struct{ se *model.SpecError }

func (e *encryptionConflict) Error() string {
	return fmt.Sprintf("%v: %v: %s", store.ErrConflict, ErrEncryption, model.JoinFieldErrors(e.se.Errors))
}

func (e *encryptionConflict) Unwrap() []error { return []error{store.ErrConflict, ErrEncryption} }

// As hands out the field errors without making the error an invalid spec.
func (e *encryptionConflict) As(target any) bool {
	if p, ok := target.(**model.SpecError); ok {
		*p = e.se
		return true
	}
	return false
}

// encryptionFormat is the format a disk requested encrypted gets.
func (c *Controller) encryptionFormat(d model.Disk) string {
	if d.EncryptionFormat != "" {
		return d.EncryptionFormat
	}
	if c.encHost.DefaultFormat != "" {
		return c.encHost.DefaultFormat // hostctl serve --ephemeral-encryption-default-format
	}
	return DefaultEncryptionFormat
}

// checkEncryption refuses, before anything is made, the encryption
// requests this host cannot honour: a new disk requested encrypted
// without a key manager, in a format other than luks or one the probe did
// not find, and an existing disk whose request differs from how it was
// created.
func (c *Controller) checkEncryption(ctx context.Context, in *model.Instance, plans []diskPlan) error {
	rec, _, err := c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	var errs []model.FieldError
	// A disk over an encrypted image is encrypted too, with a copy of the
	// image's secret for its backing file (backing.go).
	bad, err := c.checkEncryptedImages(ctx, in, plans)
	if err != nil {
		return err
	}
	errs = append(errs, bad...)
	for i, d := range in.Disks {
		f := fmt.Sprintf("disks[%d]", i)
		if !slices.ContainsFunc(plans, func(p diskPlan) bool { return p.target == d.Name }) {
			bd, ok := rec.Disks[d.Name]
			if ok && bd.Encrypted != d.Encrypted {
				errs = append(errs, model.FieldError{Field: f + ".encrypted", Value: d.Encrypted,
					Rule: fmt.Sprintf("disk %s exists and was created encrypted=%t; encryption is chosen when a disk is created (detach it and attach a new one)", d.Name, bd.Encrypted)})
			}
			continue
		}
		if !d.Encrypted {
			if d.EncryptionFormat != "" {
				errs = append(errs, model.FieldError{Field: f + ".encryption_format", Value: d.EncryptionFormat, Rule: "is set but encrypted is not"})
			}
			continue
		}
		format := c.encryptionFormat(d)
		switch {
		case c.keys == nil || c.records == nil:
			errs = append(errs, model.FieldError{Field: f + ".encrypted", Value: true, Rule: "this host has no key manager: it cannot create encrypted disks"})
		case format != encryption.FormatLUKS:
			errs = append(errs, model.FieldError{Field: f + ".encryption_format", Value: format,
				Rule: "hostctl creates luks (LUKS1 in qcow2) disks only"})
		case c.encSupport != nil:
			s, err := c.encSupport(ctx)
			if err != nil {
				return err
			}
			if s = s.Only(encryption.Creatable...); !s.Has(format) {
				errs = append(errs, model.FieldError{Field: f + ".encryption_format", Value: format,
					Rule: "this host does not support it: " + s.Why[format]})
			}
		}
	}
	if len(errs) > 0 {
		return &encryptionConflict{se: &model.SpecError{Errors: errs}}
	}
	return nil
}

// createEncrypted makes one encrypted disk: a key-manager secret, the LUKS
// qcow2 image under its passphrase, the header read back and the
// passphrase proven. Undo steps: the secret is deleted (the caller has
// registered the file's removal).
func (c *Controller) createEncrypted(ctx context.Context, r *revert.Reverter, in *model.Instance, p diskPlan) (encryption.BlockDevice, error) {
	sec, err := c.keys.Create(ctx, keys.Request{Name: "disk-" + p.target, ProjectID: in.ProjectID,
		Owner: &keys.Owner{Host: c.hostName, InstanceUUID: in.UUID, InstanceName: in.Name, Disk: p.target}})
	if err != nil {
		return encryption.BlockDevice{}, fmt.Errorf("create the secret of disk %s: %w", p.target, err)
	}
	r.Add("delete key-manager secret "+sec.UUID, func(ctx context.Context) error {
		return c.deleteSecret(ctx, sec.UUID, secretRelease{instanceUUID: in.UUID, disks: []string{p.target}})
	})
	pass, err := c.keys.Passphrase(ctx, sec.UUID)
	if err != nil {
		return encryption.BlockDevice{}, fmt.Errorf("disk %s: %w", p.target, err)
	}
	defer clear(pass)
	backing, err := c.copyImageSecret(ctx, r, in, p)
	if err != nil {
		return encryption.BlockDevice{}, err
	}
	defer clear(backing.pass)
	d := encryption.Disk{Path: p.Path, Size: p.Size}
	if p.Base != nil {
		d.Base = &encryption.Base{Path: p.Base.Path, Format: p.Base.Format}
	}
	if err := c.luks.Create(ctx, d, pass); err != nil {
		return encryption.BlockDevice{}, fmt.Errorf("create encrypted disk %s: %w", p.target, err)
	}
	info, err := c.luks.Inspect(ctx, p.Path)
	if err != nil {
		return encryption.BlockDevice{}, fmt.Errorf("disk %s: %w", p.target, err)
	}
	if !info.Encrypted || info.EncryptFormat != encryption.FormatLUKS {
		return encryption.BlockDevice{}, fmt.Errorf("disk %s: qemu-img info reads no LUKS header (encrypted=%t, format %q): not publishing it as encrypted", p.target, info.Encrypted, info.EncryptFormat)
	}
	if err := c.luks.Verify(ctx, p.Path, pass, backing.pass); err != nil {
		return encryption.BlockDevice{}, fmt.Errorf("disk %s: its passphrase does not open it: %w", p.target, err)
	}
	c.log.Info("encrypted disk created", "instance", in.Name, "disk", p.target, "secret", sec.UUID, "backing_secret", backing.uuid, "cipher", info.Cipher, "mode", info.Mode)
	return encryption.BlockDevice{Disk: p.target, Encrypted: true, EncryptionSecretUUID: sec.UUID, BackingEncryptionSecretUUID: backing.uuid,
		EncryptionFormat: encryption.FormatLUKS, EncryptionOptions: info.Options(), Created: time.Now().UTC().Truncate(time.Second)}, nil
}

// loadBlockDevices returns an instance's block-device records (empty when
// there are none) and the record's version (0: none).
func (c *Controller) loadBlockDevices(ctx context.Context, uuid string) (blockDevRecord, int64, error) {
	rec := blockDevRecord{Disks: map[string]encryption.BlockDevice{}}
	if c.records == nil || uuid == "" {
		return rec, 0, nil
	}
	sr, err := c.records.Record(ctx, blockDevPrefix+uuid)
	if errors.Is(err, store.ErrNotFound) {
		return rec, 0, nil
	}
	if err != nil {
		return rec, 0, fmt.Errorf("block devices of %s: %w", uuid, err)
	}
	if rec, err = encryption.DecodeBlockDevices(sr.Value); err != nil {
		return rec, 0, fmt.Errorf("block devices of %s: %w", uuid, err)
	}
	return rec, sr.Version, nil
}

// updateBlockDevices sets (bd non-nil) or drops (nil) the records of
// disks, registering the restoration of the previous record on r (r may
// be nil after a commit).
func (c *Controller) updateBlockDevices(ctx context.Context, r *revert.Reverter, in *model.Instance, upd map[string]*encryption.BlockDevice) error {
	if c.records == nil || len(upd) == 0 {
		return nil
	}
	rec, ver, err := c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	prev, err := encryption.EncodeBlockDevices(rec)
	if err != nil {
		return err
	}
	rec.Instance, rec.Host = in.Name, c.hostName
	for disk, bd := range upd {
		if bd == nil {
			delete(rec.Disks, disk)
		} else {
			rec.Disks[disk] = *bd
		}
	}
	key := blockDevPrefix + in.UUID
	if len(rec.Disks) == 0 {
		if ver == 0 {
			return nil
		}
		if err := c.records.DeleteRecord(ctx, key, ver); err != nil {
			return fmt.Errorf("block devices of %s: %w", in.Name, err)
		}
		if r != nil {
			r.Add("restore block-device records of "+in.Name, func(ctx context.Context) error {
				_, err := c.records.PutRecord(ctx, key, prev, 0)
				return err
			})
		}
		return nil
	}
	val, err := encryption.EncodeBlockDevices(rec)
	if err != nil {
		return err
	}
	put, err := c.records.PutRecord(ctx, key, val, ver)
	if err != nil {
		return fmt.Errorf("block devices of %s: %w", in.Name, err)
	}
	if r != nil {
		r.Add("restore block-device records of "+in.Name, func(ctx context.Context) error {
			if ver == 0 {
				return c.records.DeleteRecord(ctx, key, put.Version)
			}
			_, err := c.records.PutRecord(ctx, key, prev, put.Version)
			return err
		})
	}
	return nil
}

// told returns in as the guest is told about it — each disk's encrypted
// flag from its block-device record, never from the request — and the
// records of in's disks.
func (c *Controller) told(ctx context.Context, in *model.Instance) (*model.Instance, []encryption.BlockDevice, error) {
	rec, _, err := c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return nil, nil, err
	}
	out := clone(in)
	var bds []encryption.BlockDevice
	for i, d := range out.Disks {
		bd, ok := rec.Disks[d.Name]
		out.Disks[i].Encrypted = ok && bd.Encrypted && bd.EncryptionFormat != ""
		out.Disks[i].EncryptionFormat = ""
		if ok {
			bds = append(bds, bd)
		}
	}
	return out, bds, nil
}

// encryptedSources sets the libvirt secret of each encrypted disk of host.
func (c *Controller) encryptedSources(ctx context.Context, in *model.Instance, host *virt.Host) error {
	rec, _, err := c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	for name, src := range host.Disks {
		if bd, ok := rec.Disks[name]; ok && bd.Encrypted {
			src.SecretUUID = bd.EncryptionSecretUUID
			if bd.BackingEncryptionSecretUUID != "" {
				b, err := c.backingSource(ctx, src.Path, bd)
				if err != nil {
					return fmt.Errorf("disk %s: %w", name, err)
				}
				src.Backing = b
			}
			host.Disks[name] = src
		}
	}
	return nil
}

// secretUsage is the libvirt usage id of a disk's secret.
func (c *Controller) secretUsage(instUUID, disk string) string {
	return c.secretPrefix() + instUUID + "/" + disk
}

func (c *Controller) secretPrefix() string {
	return "vmeta/" + c.keys.KeyID() + "/"
}

// defineSecrets puts the passphrase of each encrypted disk of the
// instance into libvirt, before the domain starts; undo steps undefine
// them.
func (c *Controller) defineSecrets(ctx context.Context, r *revert.Reverter, in *model.Instance) error {
	if c.libvirtSecrets == nil || c.keys == nil {
		return nil
	}
	rec, _, err := c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	for _, d := range in.Disks {
		bd, ok := rec.Disks[d.Name]
		if !ok || !bd.Encrypted {
			continue
		}
		pass, err := c.keys.Passphrase(ctx, bd.EncryptionSecretUUID)
		if err != nil {
			return fmt.Errorf("disk %s: %w", d.Name, err)
		}
		err = c.libvirtSecrets.DefineSecret(ctx, virt.LibvirtSecret{UUID: bd.EncryptionSecretUUID, Usage: c.secretUsage(in.UUID, d.Name)}, pass)
		clear(pass)
		if err != nil {
			return fmt.Errorf("disk %s: %w", d.Name, err)
		}
		id := bd.EncryptionSecretUUID
		r.Add("undefine libvirt secret "+id, func(ctx context.Context) error { return c.libvirtSecrets.UndefineSecret(ctx, id) })
		if err := c.defineBackingSecret(ctx, r, in, d.Name, bd); err != nil {
			return err
		}
	}
	return nil
}

// undefineSecrets removes the instance's passphrases from libvirt (its
// domain does not run, or is gone).
func (c *Controller) undefineSecrets(ctx context.Context, instUUID string) error {
	if c.libvirtSecrets == nil || c.keys == nil {
		return nil
	}
	ss, err := c.libvirtSecrets.Secrets(ctx, c.secretPrefix()+instUUID+"/")
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range ss {
		if err := c.libvirtSecrets.UndefineSecret(ctx, s.UUID); err != nil {
			errs = append(errs, err)
		} else {
			c.log.Debug("libvirt secret undefined", "secret", s.UUID, "usage", s.Usage)
		}
	}
	return errors.Join(errs...)
}

// forgetDisks deletes the key-manager secrets and block-device records of
// disks that are gone (their files deleted), after the commit: failures
// are logged, and the reconciler's sweep retries.
func (c *Controller) forgetDisks(ctx context.Context, in *model.Instance, disks []string) {
	if c.records == nil || len(disks) == 0 {
		return
	}
	rec, _, err := c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		c.log.Warn("block devices of removed disks not forgotten", "instance", in.Name, "err", err)
		return
	}
	upd := map[string]*encryption.BlockDevice{}
	for _, d := range disks {
		bd, ok := rec.Disks[d]
		if !ok {
			continue
		}
		for _, id := range diskSecrets(bd) {
			if c.keys == nil {
				break
			}
			if err := c.deleteSecretQuietly(ctx, id, secretRelease{instanceUUID: in.UUID, disks: disks}); err != nil {
				c.log.Warn("secret of a removed disk not deleted", "instance", in.Name, "disk", d, "secret", id, "err", err)
			}
		}
		upd[d] = nil
	}
	if err := c.updateBlockDevices(ctx, nil, in, upd); err != nil {
		c.log.Warn("block devices of removed disks not forgotten", "instance", in.Name, "err", err)
	}
}

// replacedSecrets returns the secrets of the disks plans make anew over
// an earlier block-device record (a rebuild's root disk).
func (c *Controller) replacedSecrets(ctx context.Context, in *model.Instance, plans []diskPlan) ([]string, error) {
	rec, _, err := c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range plans {
		if bd, ok := rec.Disks[p.target]; ok {
			out = append(out, diskSecrets(bd)...)
		}
	}
	return out, nil
}

// deleteSecrets deletes secrets no disk of instance in (its UUID set)
// uses any more, after the commit; failures are logged (the reconciler's
// sweep retries), and a secret something else names stays.
func (c *Controller) deleteSecrets(ctx context.Context, in *model.Instance, ids []string) {
	for _, id := range ids {
		if err := c.deleteSecretQuietly(ctx, id, secretRelease{instanceUUID: in.UUID}); err != nil {
			c.log.Warn("secret of a replaced disk not deleted (the reconciler retries)", "instance", in.Name, "secret", id, "err", err)
		}
	}
}

// resizeDisk grows (or, shrink, shrinks back) the image of instance in's
// disk at path: an encrypted one through its passphrase (qemu-img resize
// opens the encryption layer), a plain one through the image directory.
func (c *Controller) resizeDisk(ctx context.Context, in *model.Instance, disk, path string, size int64, shrink bool) error {
	rec, _, err := c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	bd, ok := rec.Disks[disk]
	if !ok || !bd.Encrypted || c.keys == nil {
		if shrink {
			return c.imageDir.ShrinkBack(ctx, path, size)
		}
		return c.imageDir.Resize(ctx, path, size)
	}
	pass, err := c.keys.Passphrase(ctx, bd.EncryptionSecretUUID)
	if err != nil {
		return fmt.Errorf("disk %s: %w", disk, err)
	}
	defer clear(pass)
	var backing []byte
	if bd.BackingEncryptionSecretUUID != "" {
		// qemu-img resize opens the whole chain: the encrypted backing
		// file too.
		if backing, err = c.keys.Passphrase(ctx, bd.BackingEncryptionSecretUUID); err != nil {
			return fmt.Errorf("disk %s backing file: %w", disk, err)
		}
		defer clear(backing)
	}
	return c.luks.Resize(ctx, path, size, shrink, pass, backing)
}

// forgetInstance deletes every secret and the block-device records of a
// deleted instance.
func (c *Controller) forgetInstance(ctx context.Context, name, uuid string) error {
	if c.records == nil {
		return nil
	}
	rec, ver, err := c.loadBlockDevices(ctx, uuid)
	if err != nil {
		return err
	}
	var errs []error
	if c.keys != nil {
		for _, bd := range rec.Disks {
			for _, id := range diskSecrets(bd) {
				if err := c.deleteSecretQuietly(ctx, id, secretRelease{instanceUUID: uuid, allDisks: true}); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if len(errs) == 0 && ver > 0 {
		if err := c.records.DeleteRecord(ctx, blockDevPrefix+uuid, ver); err != nil && !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("forget the disks of %s: %w", name, err)
	}
	return nil
}

// sweepSecrets is the reconciler's clean-up after crashes: libvirt
// secrets of this key manager whose instance is gone or whose domain does
// not run are undefined; key-manager secrets and block-device records of
// this host's instances that no longer exist are deleted. Each instance
// is checked under its lock, so an apply or start in progress is never
// swept.
func (c *Controller) sweepSecrets(ctx context.Context) error {
	if c.keys == nil {
		return nil
	}
	var errs []error
	if c.libvirtSecrets != nil {
		ss, err := c.libvirtSecrets.Secrets(ctx, c.secretPrefix())
		if err != nil {
			return fmt.Errorf("sweep libvirt secrets: %w", err)
		}
		for _, s := range ss {
			instUUID, _, _ := strings.Cut(strings.TrimPrefix(s.Usage, c.secretPrefix()), "/")
			if err := c.sweepLibvirtSecret(ctx, s, instUUID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	secs, err := c.keys.List(ctx, "")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, s := range secs {
		o := s.Owner
		if o == nil || o.Host != c.hostName || o.InstanceName == "" {
			continue
		}
		id := s.UUID
		if err := c.sweepOwned(ctx, o.InstanceName, o.InstanceUUID, func(ctx context.Context) error {
			c.log.Warn("deleting the secret of a disk that is gone", "secret", id, "instance", o.InstanceName, "disk", o.Disk)
			return c.deleteSecretQuietly(ctx, id, secretRelease{instanceUUID: o.InstanceUUID, allDisks: true})
		}, func(rec blockDevRecord) bool {
			for _, bd := range rec.Disks {
				if slices.Contains(diskSecrets(bd), id) {
					return true
				}
			}
			return false
		}); err != nil {
			errs = append(errs, err)
		}
	}
	recs, err := c.records.Records(ctx, blockDevPrefix)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, sr := range recs {
		rec, err := encryption.DecodeBlockDevices(sr.Value)
		if err != nil || rec.Host != c.hostName || rec.Instance == "" {
			continue
		}
		uuid := strings.TrimPrefix(sr.Key, blockDevPrefix)
		if err := c.sweepOwned(ctx, rec.Instance, uuid, func(ctx context.Context) error {
			c.log.Warn("deleting the block-device records of an instance that is gone", "instance", rec.Instance, "uuid", uuid)
			return c.records.DeleteRecord(ctx, sr.Key, sr.Version)
		}, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sweepOwned runs del under the instance's lock when the store has no
// instance name with UUID uuid, or (when inUse is set) the instance's
// block-device records do not use what del deletes.
func (c *Controller) sweepOwned(ctx context.Context, name, uuid string, del func(context.Context) error, inUse func(blockDevRecord) bool) error {
	defer c.locks.Lock(name)()
	rec, err := c.store.Instance(ctx, name)
	switch {
	case err == nil && rec.UUID == uuid:
		if inUse == nil {
			return nil
		}
		bds, _, err := c.loadBlockDevices(ctx, uuid)
		if err != nil {
			return err
		}
		if inUse(bds) {
			return nil
		}
		return del(ctx)
	case err == nil, errors.Is(err, store.ErrNotFound):
		if err := del(ctx); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	default:
		return err
	}
}

// sweepLibvirtSecret undefines s unless its instance's domain runs.
func (c *Controller) sweepLibvirtSecret(ctx context.Context, s virt.LibvirtSecret, instUUID string) error {
	name := c.nameOf(ctx, instUUID)
	if name != instUUID {
		defer c.locks.Lock(name)()
		if rec, err := c.store.Instance(ctx, name); err == nil && rec.UUID == instUUID {
			st, err := c.domains.State(ctx, name)
			if err == nil && st != virt.StateShutoff {
				return nil // runs (or is paused, shutting down): QEMU may reopen the disk
			}
			if err != nil && !isNotFound(err) {
				return err
			}
		}
	}
	c.log.Info("undefining a libvirt secret whose domain does not run", "secret", s.UUID, "usage", s.Usage)
	return c.libvirtSecrets.UndefineSecret(ctx, s.UUID)
}

// SupportedEncryptionFormats returns the encryption formats this host can
// create disks in (the probe's, among those hostctl makes: luks), for the
// encryption policy and the scheduler's traits; nil without a key
// manager.
func (c *Controller) SupportedEncryptionFormats(ctx context.Context) ([]string, error) {
	if c.keys == nil || c.records == nil {
		return nil, nil
	}
	if c.encSupport == nil {
		return []string{encryption.FormatLUKS}, nil
	}
	s, err := c.encSupport(ctx)
	if err != nil {
		return nil, err
	}
	return s.Only(encryption.Creatable...).Supported(), nil
}
