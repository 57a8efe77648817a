package disks

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
func (pt *Part) encryptionFormat(d model.Disk) string {
	if d.EncryptionFormat != "" {
		return d.EncryptionFormat
	}
	if f := pt.DefaultFormat; f != "" {
		return f // hostctl serve --ephemeral-encryption-default-format
	}
	return DefaultEncryptionFormat
}

// checkEncryption refuses, before anything is made, the encryption
// requests this host cannot honour: a new disk requested encrypted
// without a key manager, in a format other than luks or one the probe did
// not find, and an existing disk whose request differs from how it was
// created.
func (pt *Part) checkEncryption(ctx context.Context, in *model.Instance, plans []diskPlan) error {
	rec, _, err := pt.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	support := pt.Support
	var errs []model.FieldError
	// A disk over an encrypted image is encrypted too, with a copy of the
	// image's secret for its backing file (backing.go).
	bad, err := pt.checkEncryptedImages(ctx, in, plans)
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
		format := pt.encryptionFormat(d)
		switch {
		case pt.Keys == nil || pt.Records == nil:
			errs = append(errs, model.FieldError{Field: f + ".encrypted", Value: true, Rule: "this host has no key manager: it cannot create encrypted disks"})
		case format != encryption.FormatLUKS:
			errs = append(errs, model.FieldError{Field: f + ".encryption_format", Value: format,
				Rule: "hostctl creates luks (LUKS1 in qcow2) disks only"})
		case support != nil:
			s, err := support(ctx)
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
func (pt *Part) createEncrypted(ctx context.Context, r *revert.Reverter, in *model.Instance, p diskPlan) (encryption.BlockDevice, error) {
	sec, err := pt.Keys.Create(ctx, keys.Request{Name: "disk-" + p.target, ProjectID: in.ProjectID,
		Owner: &keys.Owner{Host: pt.Host, InstanceUUID: in.UUID, InstanceName: in.Name, Disk: p.target}})
	if err != nil {
		return encryption.BlockDevice{}, fmt.Errorf("create the secret of disk %s: %w", p.target, err)
	}
	r.Add("delete key-manager secret "+sec.UUID, func(ctx context.Context) error {
		return pt.deleteSecret(ctx, sec.UUID, secretRelease{instanceUUID: in.UUID, disks: []string{p.target}})
	})
	pass, err := pt.Keys.Passphrase(ctx, sec.UUID)
	if err != nil {
		return encryption.BlockDevice{}, fmt.Errorf("disk %s: %w", p.target, err)
	}
	defer clear(pass)
	backing, err := pt.copyImageSecret(ctx, r, in, p)
	if err != nil {
		return encryption.BlockDevice{}, err
	}
	defer clear(backing.pass)
	d := encryption.Disk{Path: p.Path, Size: p.Size}
	if p.Base != nil {
		d.Base = &encryption.Base{Path: p.Base.Path, Format: p.Base.Format}
	}
	if err := pt.LUKS.Create(ctx, d, pass); err != nil {
		return encryption.BlockDevice{}, fmt.Errorf("create encrypted disk %s: %w", p.target, err)
	}
	info, err := pt.LUKS.Inspect(ctx, p.Path)
	if err != nil {
		return encryption.BlockDevice{}, fmt.Errorf("disk %s: %w", p.target, err)
	}
	if !info.Encrypted || info.EncryptFormat != encryption.FormatLUKS {
		return encryption.BlockDevice{}, fmt.Errorf("disk %s: qemu-img info reads no LUKS header (encrypted=%t, format %q): not publishing it as encrypted", p.target, info.Encrypted, info.EncryptFormat)
	}
	if err := pt.LUKS.Verify(ctx, p.Path, pass, backing.pass); err != nil {
		return encryption.BlockDevice{}, fmt.Errorf("disk %s: its passphrase does not open it: %w", p.target, err)
	}
	pt.log.Info("encrypted disk created", "instance", in.Name, "disk", p.target, "secret", sec.UUID, "backing_secret", backing.uuid, "cipher", info.Cipher, "mode", info.Mode)
	return encryption.BlockDevice{Disk: p.target, Encrypted: true, EncryptionSecretUUID: sec.UUID, BackingEncryptionSecretUUID: backing.uuid,
		EncryptionFormat: encryption.FormatLUKS, EncryptionOptions: info.Options(), Created: time.Now().UTC().Truncate(time.Second)}, nil
}

// loadBlockDevices returns an instance's block-device records (empty when
// there are none) and the record's version (0: none).
func (pt *Part) loadBlockDevices(ctx context.Context, uuid string) (blockDevRecord, int64, error) {
	rec := blockDevRecord{Disks: map[string]encryption.BlockDevice{}}
	if pt.Records == nil || uuid == "" {
		return rec, 0, nil
	}
	sr, err := pt.Records.Record(ctx, blockDevPrefix+uuid)
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

// UpdateBlockDevices sets (bd non-nil) or drops (nil) the records of
// disks, registering the restoration of the previous record on r (r may
// be nil after a commit).
func (pt *Part) UpdateBlockDevices(ctx context.Context, r *revert.Reverter, in *model.Instance, upd map[string]*encryption.BlockDevice) error {
	if pt.Records == nil || len(upd) == 0 {
		return nil
	}
	rec, ver, err := pt.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	prev, err := encryption.EncodeBlockDevices(rec)
	if err != nil {
		return err
	}
	rec.Instance, rec.Host = in.Name, pt.Host
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
		if err := pt.Records.DeleteRecord(ctx, key, ver); err != nil {
			return fmt.Errorf("block devices of %s: %w", in.Name, err)
		}
		if r != nil {
			r.Add("restore block-device records of "+in.Name, func(ctx context.Context) error {
				_, err := pt.Records.PutRecord(ctx, key, prev, 0)
				return err
			})
		}
		return nil
	}
	val, err := encryption.EncodeBlockDevices(rec)
	if err != nil {
		return err
	}
	put, err := pt.Records.PutRecord(ctx, key, val, ver)
	if err != nil {
		return fmt.Errorf("block devices of %s: %w", in.Name, err)
	}
	if r != nil {
		r.Add("restore block-device records of "+in.Name, func(ctx context.Context) error {
			if ver == 0 {
				return pt.Records.DeleteRecord(ctx, key, put.Version)
			}
			_, err := pt.Records.PutRecord(ctx, key, prev, put.Version)
			return err
		})
	}
	return nil
}

// told returns in as the guest is told about it — each disk's encrypted
// flag from its block-device record, never from the request — and the
// records of in's disks.
func (pt *Part) Told(ctx context.Context, in *model.Instance) (*model.Instance, []encryption.BlockDevice, error) {
	rec, _, err := pt.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return nil, nil, err
	}
	out := in.Clone()
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

// Sources sets the libvirt secret of each encrypted disk of host.
func (pt *Part) Sources(ctx context.Context, in *model.Instance, host *virt.Host) error {
	rec, _, err := pt.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	for name, src := range host.Disks {
		if bd, ok := rec.Disks[name]; ok && bd.Encrypted {
			src.SecretUUID = bd.EncryptionSecretUUID
			if bd.BackingEncryptionSecretUUID != "" {
				b, err := pt.backingSource(ctx, src.Path, bd)
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

// SecretUsage is the libvirt usage id of a disk's secret.
func (pt *Part) SecretUsage(instUUID, disk string) string {
	return pt.secretPrefix() + instUUID + "/" + disk
}

func (pt *Part) secretPrefix() string {
	return "vmeta/" + pt.Keys.KeyID() + "/"
}

// DefineSecrets puts the passphrase of each encrypted disk of the
// instance into libvirt, before the domain starts; undo steps undefine
// them.
func (pt *Part) DefineSecrets(ctx context.Context, r *revert.Reverter, in *model.Instance) error {
	if pt.Secrets == nil || pt.Keys == nil {
		return nil
	}
	rec, _, err := pt.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	for _, d := range in.Disks {
		bd, ok := rec.Disks[d.Name]
		if !ok || !bd.Encrypted {
			continue
		}
		pass, err := pt.Keys.Passphrase(ctx, bd.EncryptionSecretUUID)
		if err != nil {
			return fmt.Errorf("disk %s: %w", d.Name, err)
		}
		err = pt.Secrets.DefineSecret(ctx, virt.LibvirtSecret{UUID: bd.EncryptionSecretUUID, Usage: pt.SecretUsage(in.UUID, d.Name)}, pass)
		clear(pass)
		if err != nil {
			return fmt.Errorf("disk %s: %w", d.Name, err)
		}
		id := bd.EncryptionSecretUUID
		r.Add("undefine libvirt secret "+id, func(ctx context.Context) error { return pt.Secrets.UndefineSecret(ctx, id) })
		if err := pt.defineBackingSecret(ctx, r, in, d.Name, bd); err != nil {
			return err
		}
	}
	return nil
}

// UndefineSecrets removes the instance's passphrases from libvirt (its
// domain does not run, or is gone).
func (pt *Part) UndefineSecrets(ctx context.Context, instUUID string) error {
	if pt.Secrets == nil || pt.Keys == nil {
		return nil
	}
	ss, err := pt.Secrets.Secrets(ctx, pt.secretPrefix()+instUUID+"/")
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range ss {
		if err := pt.Secrets.UndefineSecret(ctx, s.UUID); err != nil {
			errs = append(errs, err)
		} else {
			pt.log.Debug("libvirt secret undefined", "secret", s.UUID, "usage", s.Usage)
		}
	}
	return errors.Join(errs...)
}

// Forget deletes the key-manager secrets and block-device records of
// disks that are gone (their files deleted), after the commit: failures
// are logged, and the reconciler's sweep retries.
func (pt *Part) Forget(ctx context.Context, in *model.Instance, disks []string) {
	if pt.Records == nil || len(disks) == 0 {
		return
	}
	rec, _, err := pt.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		pt.log.Warn("block devices of removed disks not forgotten", "instance", in.Name, "err", err)
		return
	}
	upd := map[string]*encryption.BlockDevice{}
	for _, d := range disks {
		bd, ok := rec.Disks[d]
		if !ok {
			continue
		}
		for _, id := range bd.SecretUUIDs() {
			if pt.Keys == nil {
				break
			}
			if err := pt.deleteSecretQuietly(ctx, id, secretRelease{instanceUUID: in.UUID, disks: disks}); err != nil {
				pt.log.Warn("secret of a removed disk not deleted", "instance", in.Name, "disk", d, "secret", id, "err", err)
			}
		}
		upd[d] = nil
	}
	if err := pt.UpdateBlockDevices(ctx, nil, in, upd); err != nil {
		pt.log.Warn("block devices of removed disks not forgotten", "instance", in.Name, "err", err)
	}
}

// replacedSecrets returns the secrets of the disks plans make anew over
// an earlier block-device record (a rebuild's root disk).
func (pt *Part) replacedSecrets(ctx context.Context, in *model.Instance, plans []diskPlan) ([]string, error) {
	rec, _, err := pt.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range plans {
		if bd, ok := rec.Disks[p.target]; ok {
			out = append(out, bd.SecretUUIDs()...)
		}
	}
	return out, nil
}

// DeleteSecrets deletes secrets no disk of instance in (its UUID set)
// uses any more, after the commit; failures are logged (the reconciler's
// sweep retries), and a secret something else names stays.
func (pt *Part) DeleteSecrets(ctx context.Context, in *model.Instance, ids []string) {
	for _, id := range ids {
		if err := pt.deleteSecretQuietly(ctx, id, secretRelease{instanceUUID: in.UUID}); err != nil {
			pt.log.Warn("secret of a replaced disk not deleted (the reconciler retries)", "instance", in.Name, "secret", id, "err", err)
		}
	}
}

// ResizeDisk grows (or, shrink, shrinks back) the image of instance in's
// disk at path: an encrypted one through its passphrase (qemu-img resize
// opens the encryption layer), a plain one through the image directory.
func (pt *Part) ResizeDisk(ctx context.Context, in *model.Instance, disk, path string, size int64, shrink bool) error {
	rec, _, err := pt.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return err
	}
	bd, ok := rec.Disks[disk]
	if !ok || !bd.Encrypted || pt.Keys == nil {
		if shrink {
			return pt.Catalog.ShrinkBack(ctx, path, size)
		}
		return pt.Catalog.Resize(ctx, path, size)
	}
	pass, err := pt.Keys.Passphrase(ctx, bd.EncryptionSecretUUID)
	if err != nil {
		return fmt.Errorf("disk %s: %w", disk, err)
	}
	defer clear(pass)
	var backing []byte
	if bd.BackingEncryptionSecretUUID != "" {
		// qemu-img resize opens the whole chain: the encrypted backing
		// file too.
		if backing, err = pt.Keys.Passphrase(ctx, bd.BackingEncryptionSecretUUID); err != nil {
			return fmt.Errorf("disk %s backing file: %w", disk, err)
		}
		defer clear(backing)
	}
	return pt.LUKS.Resize(ctx, path, size, shrink, pass, backing)
}

// ForgetInstance deletes every secret and the block-device records of a
// deleted instance.
func (pt *Part) ForgetInstance(ctx context.Context, name, uuid string) error {
	if pt.Records == nil {
		return nil
	}
	rec, ver, err := pt.loadBlockDevices(ctx, uuid)
	if err != nil {
		return err
	}
	var errs []error
	if pt.Keys != nil {
		for _, bd := range rec.Disks {
			for _, id := range bd.SecretUUIDs() {
				if err := pt.deleteSecretQuietly(ctx, id, secretRelease{instanceUUID: uuid, allDisks: true}); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if len(errs) == 0 && ver > 0 {
		if err := pt.Records.DeleteRecord(ctx, blockDevPrefix+uuid, ver); err != nil && !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("forget the disks of %s: %w", name, err)
	}
	return nil
}

// Sweep is the reconciler's clean-up after crashes: libvirt
// secrets of this key manager whose instance is gone or whose domain does
// not run are undefined; key-manager secrets and block-device records of
// this host's instances that no longer exist are deleted. Each instance
// is checked under its lock, so an apply or start in progress is never
// swept.
func (pt *Part) Sweep(ctx context.Context) error {
	if pt.Keys == nil {
		return nil
	}
	var errs []error
	if pt.Secrets != nil {
		ss, err := pt.Secrets.Secrets(ctx, pt.secretPrefix())
		if err != nil {
			return fmt.Errorf("sweep libvirt secrets: %w", err)
		}
		for _, s := range ss {
			instUUID, _, _ := strings.Cut(strings.TrimPrefix(s.Usage, pt.secretPrefix()), "/")
			if err := pt.sweepLibvirtSecret(ctx, s, instUUID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	secs, err := pt.Keys.List(ctx, "")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, s := range secs {
		o := s.Owner
		if o == nil || o.Host != pt.Host || o.InstanceName == "" {
			continue
		}
		id := s.UUID
		if err := pt.sweepOwned(ctx, o.InstanceName, o.InstanceUUID, func(ctx context.Context) error {
			pt.log.Warn("deleting the secret of a disk that is gone", "secret", id, "instance", o.InstanceName, "disk", o.Disk)
			return pt.deleteSecretQuietly(ctx, id, secretRelease{instanceUUID: o.InstanceUUID, allDisks: true})
		}, func(rec blockDevRecord) bool {
			for _, bd := range rec.Disks {
				if slices.Contains(bd.SecretUUIDs(), id) {
					return true
				}
			}
			return false
		}); err != nil {
			errs = append(errs, err)
		}
	}
	recs, err := pt.Records.Records(ctx, blockDevPrefix)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, sr := range recs {
		rec, err := encryption.DecodeBlockDevices(sr.Value)
		if err != nil || rec.Host != pt.Host || rec.Instance == "" {
			continue
		}
		uuid := strings.TrimPrefix(sr.Key, blockDevPrefix)
		if err := pt.sweepOwned(ctx, rec.Instance, uuid, func(ctx context.Context) error {
			pt.log.Warn("deleting the block-device records of an instance that is gone", "instance", rec.Instance, "uuid", uuid)
			return pt.Records.DeleteRecord(ctx, sr.Key, sr.Version)
		}, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sweepOwned runs del under the instance's lock when the store has no
// instance name with UUID uuid, or (when inUse is set) the instance's
// block-device records do not use what del deletes.
func (pt *Part) sweepOwned(ctx context.Context, name, uuid string, del func(context.Context) error, inUse func(blockDevRecord) bool) error {
	defer pt.core.LockInstance(name)()
	rec, err := pt.Instances.Instance(ctx, name)
	switch {
	case err == nil && rec.UUID == uuid:
		if inUse == nil {
			return nil
		}
		bds, _, err := pt.loadBlockDevices(ctx, uuid)
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
func (pt *Part) sweepLibvirtSecret(ctx context.Context, s virt.LibvirtSecret, instUUID string) error {
	return pt.core.UnlessRunning(ctx, instUUID, func(ctx context.Context) error {
		pt.log.Info("undefining a libvirt secret whose domain does not run", "secret", s.UUID, "usage", s.Usage)
		return pt.Secrets.UndefineSecret(ctx, s.UUID)
	})
}

// SupportedFormats returns the encryption formats this host can
// create disks in (the probe's, among those hostctl makes: luks), for the
// encryption policy and the scheduler's traits; nil without a key
// manager.
func (pt *Part) SupportedFormats(ctx context.Context) ([]string, error) {
	if pt.Keys == nil || pt.Records == nil {
		return nil, nil
	}
	support := pt.Support
	if support == nil {
		return []string{encryption.FormatLUKS}, nil
	}
	s, err := support(ctx)
	if err != nil {
		return nil, err
	}
	return s.Only(encryption.Creatable...).Supported(), nil
}
