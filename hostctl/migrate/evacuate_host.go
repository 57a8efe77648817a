package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// EvacCore is what a host's side of evacuations needs of the controller
// core (hostctl/controller implements it): the moves' Core, and the host
// ownership the adopt uses.
type EvacCore interface {
	Core
	OwnerDown(ctx context.Context, what string, rec store.Instance) error
	CommittedRecordParts(ctx context.Context, op part.Op, rec store.Instance) []string
}

// EvacDisks is the disks part's side of evacuations (hostctl/parts/disks).
type EvacDisks interface {
	DiskRecords
	// Plans says how the disks of in that have no file here would be
	// made (the image looked up: a missing one is a field error).
	Plans(ctx context.Context, in *model.Instance) ([]disks.Plan, error)
	UpdateBlockDevices(ctx context.Context, r *revert.Reverter, in *model.Instance, upd map[string]*encryption.BlockDevice) error
	ForgetInstance(ctx context.Context, name, uuid string) error
	ReleaseSecret(ctx context.Context, id, image string) error
}

// EvacHost is one host's side of evacuations, as the new host (EvacDest)
// and as the old host come back (EvacSource), over its controller core
// and disks part.
type EvacHost struct {
	Name  string
	Core  EvacCore
	Disks EvacDisks
	Log   *slog.Logger
}

func (h *EvacHost) log() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}

// Instance implements EvacDest.
func (h *EvacHost) Instance(ctx context.Context, name string) (store.Instance, error) {
	return h.Core.Instance(ctx, name)
}

// CheckEvacuate implements EvacDest.
func (h *EvacHost) CheckEvacuate(ctx context.Context, rec store.Instance) error {
	if hv, _ := h.Core.Capabilities(); !hv {
		return fmt.Errorf("%w: this host runs without a hypervisor (--virt none): it cannot rebuild an instance; `hostctl instance adopt %s` moves its record", ErrState, rec.Name)
	}
	if rec.Host == "" || rec.Host == h.Name {
		return fmt.Errorf("%w: %s lives on this host (%s): only an instance of a down host is evacuated", ErrInvalid, rec.Name, h.Name)
	}
	if err := h.Core.OwnerDown(ctx, "evacuate "+rec.Name, rec); err != nil {
		return err
	}
	if err := h.Core.CheckRecordParts(ctx, part.Evacuate, rec); err != nil {
		return err
	}
	cur, err := h.Core.CurrentDomain(ctx, rec.Name, "")
	if err != nil {
		return err
	}
	if cur != nil {
		return fmt.Errorf("%w: this host's libvirt has a domain named %s already", ErrState, rec.Name)
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	// (A disk whose file this host has, left by an earlier stay of the
	// instance here, is not planned; Rebuild removes such files first.)
	if _, err := h.Disks.Plans(ctx, in); err != nil {
		return errkind.Errorf(errkind.Conflict, "this host cannot make the instance's disks: %w", err)
	}
	return nil
}

// SourceDown implements EvacDest.
func (h *EvacHost) SourceDown(ctx context.Context, rec Evacuation) error {
	return h.Core.OwnerDown(ctx, "evacuate "+rec.Instance, store.Instance{Name: rec.Instance, Host: rec.Source})
}

// TakeOver implements EvacDest.
func (h *EvacHost) TakeOver(ctx context.Context, rec Evacuation) error {
	defer h.Core.LockInstance(rec.Instance)()
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return err
	}
	switch srec.Host {
	case h.Name:
	case rec.Source:
		if srec, err = h.Core.TakeOver(ctx, srec); err != nil {
			return err
		}
	default:
		return errkind.Errorf(errkind.Conflict, "%s lives on %s, neither %s nor %s: the evacuation does not own it", rec.Instance, srec.Host, rec.Source, h.Name)
	}
	for _, w := range h.Core.CommittedRecordParts(ctx, part.Evacuate, srec) {
		h.log().Warn("evacuation: "+w, "name", rec.Instance)
	}
	return nil
}

// OldSecrets implements EvacDest.
func (h *EvacHost) OldSecrets(ctx context.Context, uuid string) ([]string, error) {
	bds, err := h.Disks.BlockDevices(ctx, uuid)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return bds.SecretUUIDs(), nil
}

// ReleaseDisks implements EvacDest.
func (h *EvacHost) ReleaseDisks(ctx context.Context, rec Evacuation) error {
	defer h.Core.LockInstance(rec.Instance)()
	bds, err := h.Disks.BlockDevices(ctx, rec.UUID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	upd := map[string]*encryption.BlockDevice{}
	for disk := range bds.Disks {
		upd[disk] = nil
	}
	return h.Disks.UpdateBlockDevices(ctx, nil, &model.Instance{Name: rec.Instance, UUID: rec.UUID}, upd)
}

// Rebuild implements EvacDest.
func (h *EvacHost) Rebuild(ctx context.Context, rec Evacuation) error {
	defer h.Core.LockInstance(rec.Instance)()
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return err
	}
	if srec.Host != h.Name {
		return fmt.Errorf("%w: %s is %s's, not this host's", ErrState, rec.Instance, srec.Host)
	}
	in, err := decodeSpec(srec)
	if err != nil {
		return err
	}
	// What an attempt that stopped half-way left here: its domain, its
	// libvirt secrets, disks and their new secrets (the block-device
	// record names only this host's since disks-released).
	r := revert.New(h.log(), "remove what an earlier evacuation of "+in.Name+" left")
	err = h.Core.RemoveDomain(ctx, r, in)
	r.Success()
	if err != nil {
		return err
	}
	if err := h.Disks.UndefineSecrets(ctx, in.UUID); err != nil {
		return err
	}
	if err := h.Disks.ForgetInstance(ctx, in.Name, in.UUID); err != nil {
		return err
	}
	if err := os.RemoveAll(h.Core.InstanceDir(in.Name)); err != nil {
		return err
	}
	pi := &part.Instance{Spec: in, Host: h.Name}
	end, err := part.Set(h.Core.Parts()).Claim(ctx, part.Evacuate, pi)
	if err != nil {
		return err
	}
	_, err = h.Core.ApplyFor(ctx, part.Evacuate, in, nil, srec.Revision)
	end(ctx, err)
	return err
}

// Boot implements EvacDest.
func (h *EvacHost) Boot(ctx context.Context, rec Evacuation) error {
	defer h.Core.LockInstance(rec.Instance)()
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return err
	}
	if h.Core.PowerState(ctx, rec.Instance, rec.UUID) == "running" {
		return nil
	}
	return h.Core.Resume(ctx, srec)
}

// Reclaim implements EvacSource.
func (h *EvacHost) Reclaim(ctx context.Context, rec Evacuation) (bool, error) {
	defer h.Core.LockInstance(rec.Instance)()
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if srec.UUID != rec.UUID || srec.Host != h.Name {
		return false, nil
	}
	if _, err := h.Core.TakeOver(ctx, srec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return false, nil // the new host's takeover won
		}
		return false, err
	}
	return true, nil
}

// oldSpec is the instance as the old host had it.
func oldSpec(rec Evacuation) (*model.Instance, error) {
	var in model.Instance
	if err := json.Unmarshal(rec.Spec, &in); err != nil {
		return nil, fmt.Errorf("evacuation of %s: decode the spec: %w", rec.Instance, err)
	}
	if in.UUID == "" {
		in.UUID = rec.UUID
	}
	return &in, nil
}

// RemoveLocal implements EvacSource. It refuses while this host owns the
// instance (an evacuation cancelled or not yet taken over).
func (h *EvacHost) RemoveLocal(ctx context.Context, rec Evacuation) error {
	defer h.Core.LockInstance(rec.Instance)()
	srec, err := h.Core.Instance(ctx, rec.Instance)
	switch {
	case err == nil && srec.UUID == rec.UUID && srec.Host == h.Name:
		return fmt.Errorf("%w: %s lives on this host: its copy stays", ErrState, rec.Instance)
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return err
	}
	in, err := oldSpec(rec)
	if err != nil {
		return err
	}
	if hv, _ := h.Core.Capabilities(); hv {
		r := revert.New(h.log(), "remove the evacuated "+in.Name)
		err = h.Core.RemoveDomain(ctx, r, in)
		r.Success()
		if err != nil {
			return err
		}
	}
	if err := h.Disks.UndefineSecrets(ctx, in.UUID); err != nil {
		return err
	}
	if err := os.RemoveAll(h.Core.InstanceDir(in.Name)); err != nil {
		return err
	}
	h.log().Info("evacuated instance's domain, libvirt secrets and files removed here", "name", in.Name, "now_on", rec.Dest)
	return nil
}

// DeleteSecrets implements EvacSource: each old secret by the disks
// part's one rule (a secret something else names, an image, stays).
func (h *EvacHost) DeleteSecrets(ctx context.Context, rec Evacuation) error {
	var errs []error
	for _, id := range rec.OldSecrets {
		err := h.Disks.ReleaseSecret(ctx, id, "")
		switch {
		case err == nil, errors.Is(err, keys.ErrNotFound), errors.Is(err, store.ErrNotFound):
		case errors.Is(err, keys.ErrInUse):
			h.log().Info("an evacuated disk's secret stays: something else names it", "secret", id, "err", err)
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Release implements EvacSource.
func (h *EvacHost) Release(ctx context.Context, rec Evacuation) error {
	in, err := oldSpec(rec)
	if err != nil {
		return err
	}
	pi := &part.Instance{Spec: in, Host: h.Name}
	return part.Run(part.Set(h.Core.Parts()), part.Evacuate, func(m part.Mover) error { return m.Moved(ctx, part.Evacuate, pi) })
}

var (
	_ EvacDest   = (*EvacHost)(nil)
	_ EvacSource = (*EvacHost)(nil)
)
