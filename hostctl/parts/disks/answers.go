package disks

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/revert"
)

// Name implements part.Answerer.
func (*Part) Name() string { return "disks" }

// Answers implements part.Answerer: what the disks and their encryption
// do for every operation. The part is registered with the core among
// the parts; but for AfterDelete the core calls it at its own points of
// an operation through controller.Disks (the disks are laid out before
// any part's Prepare; their secrets follow the domain's start and stop),
// and the operations in hostctl/ops through their Disks role.
func (*Part) Answers() part.Answers {
	return part.Answers{
		part.Apply:            {Do: part.Act, Why: "makes the disks that have no file (LUKS under a new key-manager secret where the spec, flavor or image encrypts) with their block-device records; a removed disk's secret and record go"},
		part.Start:            {Do: part.Act, Why: "defines the encrypted disks' libvirt secrets before the domain starts"},
		part.Stop:             {Do: part.Act, Why: "undefines the libvirt secrets once the domain stopped"},
		part.RebootSoft:       {Do: part.Nothing, Why: "the running domain keeps its secrets"},
		part.RebootHard:       {Do: part.Act, Why: "a stop and a start: the libvirt secrets are undefined and defined again"},
		part.Delete:           {Do: part.Act, Why: "the libvirt secrets, the key-manager secrets nothing else names and the block-device records go with the instance"},
		part.ForceDelete:      {Do: part.Nothing, Why: "the disks stay on the lost host (the operator removes them there); that host's sweep deletes the secrets and records no instance names"},
		part.Adopt:            {Do: part.Nothing, Why: "the block-device records and secrets are the store's; the adopting host defines the libvirt secrets when it starts the instance"},
		part.Shelve:           {Do: part.Act, Why: "the root disk goes into the shelved image, which keeps its secret; the other disks' secrets and records go"},
		part.Unshelve:         {Do: part.Act, Why: "the disks are made again as by an apply, the root over the shelved image"},
		part.Rescue:           {Do: part.Act, Why: "a libvirt secret for the rescue image's own key-manager secret and a record of the rescue disk"},
		part.Unrescue:         {Do: part.Act, Why: "the rescue disk's libvirt secret and record go"},
		part.Resize:           {Do: part.Act, Why: "disks grow with the new flavor, LUKS payloads resized"},
		part.Rebuild:          {Do: part.Act, Why: "the root disk is made again over the new image, its secret as the image's encryption says"},
		part.Snapshot:         {Do: part.Act, Why: "the snapshot image names a secret (the same, a new or an existing one); a new one is released if the snapshot fails"},
		part.MigrateCold:      {Do: part.Act, Why: "the disk files move as they are (LUKS ciphertext, never plaintext); each secret is rewrapped under the destination's key-encryption key (the source's wrap kept for a revert) and the destination defines the libvirt secrets before the domain"},
		part.MigrateLive:      {Do: part.Act, Why: "the destination's disk files are made empty with the source's format and size and libvirt copies the guest's blocks into them (NBD); each secret is rewrapped under the destination's key and its libvirt secret defined there before the switchover; the source's files, libvirt secrets and wrap go once it is done"},
		part.ConfirmMigration: {Do: part.Act, Why: "the source's disk files, libvirt secrets and its wrap of each secret go; the key-manager secrets stay with their disks"},
		part.RevertMigration:  {Do: part.Act, Why: "the destination's disk files and libvirt secrets go; each secret gets the source's wrap back"},
		part.Evacuate:         {Do: part.Act, Why: "the disks are made anew on the new host from the image and flavor, encrypted ones under new key-manager secrets wrapped by that host's key; the old secrets stay wrapped under the dead host's key until it comes back and deletes them with their disks"},
	}
}

// The phases of part.Part: but for AfterDelete, the core calls the part
// through controller.Disks instead (Answers).

// Check implements part.Part: the disks refuse nothing here (Make
// refuses what this host cannot make).
func (*Part) Check(context.Context, part.Op, *part.Instance) error { return nil }

// Prepare implements part.Part.
func (*Part) Prepare(context.Context, part.Op, *part.Instance, *revert.Reverter, *part.Contribution) error {
	return nil
}

// Devices implements part.Part: the disks are the spec's, shown with
// their block-device records.
func (*Part) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart and AfterStop implement part.Part.
func (*Part) AfterStart(context.Context, *part.Instance) error { return nil }
func (*Part) AfterStop(context.Context, *part.Instance) error  { return nil }

// AfterDelete implements part.Part: the disks went with the instance,
// and their secrets go with them, from libvirt (the domain is gone) and
// from the key manager (those nothing else names), with the
// block-device records. What fails is left to the reconciler's sweep.
func (pt *Part) AfterDelete(ctx context.Context, in *part.Instance) error {
	err := pt.UndefineSecrets(ctx, in.Spec.UUID)
	if err != nil {
		err = fmt.Errorf("libvirt secrets of %s not undefined (the reconciler retries): %w", in.Spec.Name, err)
	}
	return errors.Join(err, pt.ForgetInstance(ctx, in.Spec.Name, in.Spec.UUID))
}

var _ part.Part = (*Part)(nil)
