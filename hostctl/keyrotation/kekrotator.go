package keyrotation

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/internal/keys"
)

// NewKEKRotator returns the procedure of the key-encryption-key class
// (KEK): keys.(*Manager).RotateKEK, which writes the new generation to
// the key file before anything is rewrapped, rewraps every secret of this
// host (and its pending passphrase, and the host's check record) in
// batches, and retires the older generations when nothing uses them. It
// is idempotent for a generation, as Rotator requires.
//
// Wiring (the daemon, after keys.Open):
//
//	engine.Register(keyrotation.KEK, keyrotation.NewKEKRotator(km))
//	if km.KEK().Created {
//		engine.MarkCreated(ctx, keyrotation.Subject{Class: keyrotation.KEK})
//	}
//
// A KEK the daemon did not create this start keeps its status; with no
// status yet, its generation is km.KEK().Current (the key file tracks
// the status generation from its creation at 1). The class has no
// Recoverer on purpose: an interrupted rotation leaves every secret
// readable (the file keeps every generation still in use, and keys.Open
// accepts a file whose current generation is newer than some secrets), so
// nothing must happen before serving; the Engine's persisted target makes
// its next Run call Rotate for the same generation, which finishes it.
func NewKEKRotator(m *keys.Manager) Rotator { return kekRotator{m} }

type kekRotator struct{ m *keys.Manager }

func (r kekRotator) Rotate(ctx context.Context, s Subject, gen int64, _ int, progress func(Progress)) (Result, error) {
	if s.Class != KEK || s.InstanceUUID != "" {
		return Result{}, fmt.Errorf("%w: %s: the key-encryption-key procedure rotates class %s only", ErrInvalid, s, KEK)
	}
	var report func(done, total int)
	if progress != nil {
		report = func(done, total int) { progress(Progress{Done: done, Total: total}) }
	}
	if _, err := r.m.RotateKEK(ctx, gen, report); err != nil {
		return Result{}, err
	}
	return Result{Done: true}, nil
}

// Generation implements Generationer: the key file's current generation.
func (r kekRotator) Generation(context.Context, Subject) (int64, error) {
	return r.m.KEK().Current, nil
}
