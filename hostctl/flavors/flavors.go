// Package flavors is hostctl's flavor registry: Nova's flavors (vCPUs,
// RAM, root, ephemeral and swap disk sizes, extra specs), kept as
// versioned records in the store ("flavor/NAME"), so every host sharing
// the store sees the same flavors. Extra specs that ask for ephemeral
// encryption are checked by hostctl/encryption; unknown ones are kept as
// given.
package flavors

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// RecordPrefix is the prefix of flavor records.
const RecordPrefix = "flavor/"

// Limits of a flavor's sizes.
const (
	MaxVCPUs     = 1024
	MaxRAM       = 16 << 20 // MiB: 16 TiB
	MaxDiskGiB   = 64 << 10 // 64 TiB
	MaxSwapMiB   = 1 << 20  // 1 TiB
	maxNameBytes = 255
)

// nameRE: the characters of a store key (a flavor's name is part of its
// record key), starting with a letter or digit.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

// Records is what the registry needs from the store.
type Records interface {
	Record(ctx context.Context, key string) (store.Record, error)
	PutRecord(ctx context.Context, key string, value []byte, expectVersion int64) (store.Record, error)
	DeleteRecord(ctx context.Context, key string, expectVersion int64) error
	Records(ctx context.Context, prefix string) ([]store.Record, error)
}

// Registry keeps flavors in the store.
type Registry struct {
	Store Records
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Check validates a flavor as written by an operator, every problem as a
// field error.
func Check(f Flavor) error {
	var errs []model.FieldError
	add := func(field string, value any, rule string, args ...any) {
		errs = append(errs, model.FieldError{Field: field, Value: value, Rule: fmt.Sprintf(rule, args...)})
	}
	switch {
	case f.Name == "":
		add("name", nil, "is required")
	case len(f.Name) > maxNameBytes || !nameRE.MatchString(f.Name):
		add("name", f.Name, "must be 1 to %d ASCII letters, digits, '.', '_', ':' or '-', starting with a letter or digit", maxNameBytes)
	}
	if f.VCPUs < 1 || f.VCPUs > MaxVCPUs {
		add("vcpus", f.VCPUs, "must be 1 to %d", MaxVCPUs)
	}
	if f.RAM < 1 || f.RAM > MaxRAM {
		add("ram", f.RAM, "must be 1 to %d MiB", MaxRAM)
	}
	if f.Disk < 0 || f.Disk > MaxDiskGiB {
		add("disk", f.Disk, "must be 0 (the image's size) to %d GiB", MaxDiskGiB)
	}
	if f.Ephemeral < 0 || f.Ephemeral > MaxDiskGiB {
		add("ephemeral", f.Ephemeral, "must be 0 (none) to %d GiB", MaxDiskGiB)
	}
	if f.Swap < 0 || f.Swap > MaxSwapMiB {
		add("swap", f.Swap, "must be 0 (none) to %d MiB", MaxSwapMiB)
	}
	if len(f.Description) > 65535 {
		add("description", len(f.Description), "must be at most 65535 bytes")
	}
	errs = append(errs, policy.CheckFlavorSpecs("extra_specs", f.ExtraSpecs)...)
	if len(errs) > 0 {
		return &model.SpecError{Errors: errs, Of: "flavor"}
	}
	return nil
}

func key(name string) string { return RecordPrefix + name }

// Create stores a new flavor; a flavor of that name already existing is
// ErrConflict, an invalid one a *model.SpecError. Nothing is stored on
// error.
func (r *Registry) Create(ctx context.Context, f Flavor) (Flavor, error) {
	f.Name = strings.TrimSpace(f.Name)
	if err := Check(f); err != nil {
		return Flavor{}, fmt.Errorf("create flavor %s: %w", f.Name, err)
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	f.Created, f.Version = now().UTC().Truncate(time.Second), 0
	if len(f.ExtraSpecs) == 0 {
		f.ExtraSpecs = nil
	}
	val, err := encodeFlavor(f)
	if err != nil {
		return Flavor{}, fmt.Errorf("create flavor %s: %w", f.Name, err)
	}
	rec, err := r.Store.PutRecord(ctx, key(f.Name), val, 0)
	if errors.Is(err, store.ErrConflict) {
		return Flavor{}, fmt.Errorf("create flavor %s: %w: a flavor of that name exists (flavors are not changed in place: delete it first)", f.Name, store.ErrConflict)
	}
	if err != nil {
		return Flavor{}, fmt.Errorf("create flavor %s: %w", f.Name, err)
	}
	f.Version = rec.Version
	return f, nil
}

// Get returns a flavor by name (ErrNotFound when there is none).
func (r *Registry) Get(ctx context.Context, name string) (Flavor, error) {
	if store.CheckKey(key(name)) != nil {
		return Flavor{}, fmt.Errorf("flavor %q: %w", name, store.ErrNotFound)
	}
	rec, err := r.Store.Record(ctx, key(name))
	if err != nil {
		return Flavor{}, fmt.Errorf("flavor %s: %w", name, err)
	}
	return decode(rec)
}

func decode(rec store.Record) (Flavor, error) {
	f, err := decodeFlavor(rec.Value, rec.Version)
	if err != nil {
		return Flavor{}, fmt.Errorf("flavor record %s: %w", rec.Key, err)
	}
	return f, nil
}

// List returns every flavor, sorted by name.
func (r *Registry) List(ctx context.Context) ([]Flavor, error) {
	recs, err := r.Store.Records(ctx, RecordPrefix)
	if err != nil {
		return nil, fmt.Errorf("list flavors: %w", err)
	}
	out := make([]Flavor, 0, len(recs))
	for _, rec := range recs {
		f, err := decode(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// Delete removes a flavor unless inUse names instances that use it
// (ErrConflict naming them). The record is removed only at the version
// that was checked.
func (r *Registry) Delete(ctx context.Context, name string, inUse func(ctx context.Context) ([]string, error)) error {
	f, err := r.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("delete %w", err)
	}
	if inUse != nil {
		users, err := inUse(ctx)
		if err != nil {
			return fmt.Errorf("delete flavor %s: %w", name, err)
		}
		if len(users) > 0 {
			return fmt.Errorf("delete flavor %s: %w: in use by instance(s) %s", name, store.ErrConflict, strings.Join(users, ", "))
		}
	}
	if err := r.Store.DeleteRecord(ctx, key(name), f.Version); err != nil {
		return fmt.Errorf("delete flavor %s: %w", name, err)
	}
	return nil
}
