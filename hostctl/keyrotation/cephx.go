package keyrotation

import (
	"context"
	"fmt"
)

// CephXVersionUpgradeRefused is why the cephx class refuses
// WithVersionUpgrade: the key-rotation specification's rule for the CSI
// keys that mount CephFS, which hostctl's CephX client is.
const CephXVersionUpgradeRefused = "not supported for the CephX keys that mount CephFS shares unless it can be validated that they rotate without the risk of affecting existing mounts' connectivity (the key-rotation specification's rule for CSI keys): use KeyGeneration"

// CephXClient is this host's CephX client for CephFS shares, in
// generations client.vmeta-<host>.<gen> (hostctl/shares.CephX).
type CephXClient interface {
	// Configured reports whether the host has an admin keyring (without
	// one there is no client to rotate).
	Configured(ctx context.Context) bool
	// Generation is the newest generation (0: none).
	Generation(ctx context.Context) (int64, error)
	// RotateTo makes gen the newest generation (idempotent for a gen)
	// and prunes prior generations beyond keep that no mount uses; it
	// returns how many prior generations remain and the Ceph version.
	RotateTo(ctx context.Context, gen int64, keep int) (prior int, cephVersion string, err error)
	// Prune deletes prior generations beyond keep that no mount uses.
	Prune(ctx context.Context, keep int) (int, error)
	// PriorHolders lists the instances whose mounts use a generation
	// below the newest.
	PriorHolders(ctx context.Context) ([]Holder, error)
	// CephVersion is the cluster's version ("" when it cannot be asked).
	CephVersion(ctx context.Context) string
}

// Holder is a user of a prior key: an instance whose CephFS share is
// mounted with a prior generation of the host's CephX client.
type Holder struct {
	InstanceUUID string `json:"instance_uuid"`
	Share        string `json:"share_id"`
	Generation   int64  `json:"generation"`
	Client       string `json:"client"`
}

// HolderLister is a Rotator that names who still holds prior keys
// (Report.Holders).
type HolderLister interface {
	Holders(ctx context.Context) ([]Holder, error)
}

// CephVersioner is a Rotator that knows the Ceph version minting its
// keys (the status's keyCephVersion, filled when the status is first
// recorded).
type CephVersioner interface {
	KeyCephVersion(ctx context.Context) string
}

// GenerationAdopter is a Generationer whose keys may be created outside
// a rotation after the status was first recorded: the Engine adopts the
// higher generation it reports.
type GenerationAdopter interface {
	Generationer
	AdoptGeneration() bool
}

// CephXRotator is the cephx class's procedure: overlapping rotation as
// the specification has it for CSI keys — a rotation creates
// client.vmeta-<host>.<gen> with the same capabilities; new mounts use
// it; existing mounts keep their generation until their instances stop;
// prior generations beyond keepPriorKeyCount are deleted from Ceph only
// when no mount uses them (at a rotation, or `hostctl keys prune cephx`).
type CephXRotator struct{ Client CephXClient }

var (
	_ Rotator       = CephXRotator{}
	_ Generationer  = CephXRotator{}
	_ Pruner        = CephXRotator{}
	_ HolderLister  = CephXRotator{}
	_ CephVersioner = CephXRotator{}

	_ GenerationAdopter = CephXRotator{}
)

// AdoptGeneration implements GenerationAdopter: the host's client is
// created by `hostctl share ceph-auth`, whenever the operator runs it.
func (CephXRotator) AdoptGeneration() bool { return true }

// Rotate implements Rotator.
func (r CephXRotator) Rotate(ctx context.Context, _ Subject, gen int64, keep int, _ func(Progress)) (Result, error) {
	if !r.Client.Configured(ctx) {
		return Result{Pending: "no CephX admin keyring on this host yet (hostctl share ceph-auth --admin-keyring FILE --mon MONS)"}, nil
	}
	prior, ver, err := r.Client.RotateTo(ctx, gen, keep)
	if err != nil {
		return Result{}, fmt.Errorf("cephx: %w", err)
	}
	return Result{Done: true, PriorKeyCount: &prior, KeyCephVersion: ver}, nil
}

// Generation implements Generationer.
func (r CephXRotator) Generation(ctx context.Context, _ Subject) (int64, error) {
	return r.Client.Generation(ctx)
}

// Prune implements Pruner.
func (r CephXRotator) Prune(ctx context.Context, keep int) (int, error) {
	return r.Client.Prune(ctx, keep)
}

// Holders implements HolderLister.
func (r CephXRotator) Holders(ctx context.Context) ([]Holder, error) {
	return r.Client.PriorHolders(ctx)
}

// KeyCephVersion implements CephVersioner.
func (r CephXRotator) KeyCephVersion(ctx context.Context) string { return r.Client.CephVersion(ctx) }
