// Package layout lays an instance out from its spec, its flavor and its
// image before anything is created, as Nova lays out an instance's local
// disks: the flavor's vCPUs and memory, its root disk "disk" from the
// image, ephemeral "disk.eph0" and swap "disk.swap" (virtio, in that
// order, then the spec's other disks), and the ephemeral encryption
// decision (hostctl/encryption/policy) as per-disk requests. A resize
// lays an instance out for another flavor (its disks never shrink), a
// rebuild for another root image; a disk attached later is encrypted as
// the instance's flavor and image say.
//
// The package only decides: it changes nothing on the host, and reaches
// the flavor registry (hostctl/flavors), the image catalog
// (hostctl/images) and the encryption policy through the narrow
// interfaces Flavors, Images and Encryption. The controller core lays
// out every apply with it; the operations of hostctl/ops resize and
// rebuild with it.
package layout

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Flavors finds a registered flavor (*flavors.Registry); an unknown
// name is an error wrapping store.ErrNotFound.
type Flavors interface {
	Get(ctx context.Context, name string) (flavors.Flavor, error)
}

// Images finds an image of the catalog (*images.Dir); an unknown name
// is an error wrapping store.ErrNotFound.
type Images interface {
	Get(ctx context.Context, name string) (images.Image, error)
}

// Templates makes (or finds cached) the blank disk an ephemeral or swap
// disk is an overlay of (*images.Templates).
type Templates interface {
	Template(ctx context.Context, kind string, size int) (images.Base, error)
}

// Layout lays instances out from the flavors of Flavors (nil: the store
// keeps no records, so no flavor is registered), the images of Images
// and the encryption decisions of Encryption.
type Layout struct {
	Flavors    Flavors
	Images     Images
	Encryption Encryption
}

// DefaultHost is a host's encryption formats and default format when
// its configuration names none.
var DefaultHost = policy.Host{Formats: []string{policy.FormatLUKS}, DefaultFormat: policy.FormatLUKS}

// ErrNoRecords: the store keeps no records, so there are no flavors.
var ErrNoRecords = errors.New("the store of this controller keeps no records (flavors)")

// FlavorOf returns the registered flavor an instance names, or nil when
// it names none or one that is not registered (then the name is only a
// label, reported as the EC2 instance-type, as before flavors were
// registered).
func (l *Layout) FlavorOf(ctx context.Context, name string) (*flavors.Flavor, error) {
	if name == "" || l.Flavors == nil {
		return nil, nil
	}
	f, err := l.Flavors.Get(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &f, nil
}

// ImageOf returns the image an instance names, or nil when it names none
// or the catalog has none of that name (the disks' plan reports a
// missing image when a disk needs it).
func (l *Layout) ImageOf(ctx context.Context, name string) (*images.Image, error) {
	if name == "" {
		return nil, nil
	}
	img, err := l.Images.Get(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &img, nil
}

// Apply completes an instance from its flavor and image before it is
// applied over old (its stored spec; nil for a new instance): the
// flavor's vCPUs and memory, its disks as Nova lays them out, and the
// ephemeral encryption decision as per-disk requests. It returns
// warnings (a flavor name no flavor has). A conflict is an error wrapping
// part.ErrState or store.ErrConflict, bad input a *model.SpecError;
// nothing but in is changed (on error, in may be laid out in part).
func (l *Layout) Apply(ctx context.Context, in, old *model.Instance) ([]string, error) {
	if old != nil && LaidOut(old) {
		// Laid out by a flavor: its flavor and image change only by
		// resize and rebuild, which grow and remake disks.
		switch {
		case in.Flavor != old.Flavor:
			return nil, fmt.Errorf("apply %s: %w: flavor %q: the instance has flavor %q; change it with `hostctl instance resize`", in.Name, part.ErrState, in.Flavor, old.Flavor)
		case in.Image != old.Image:
			return nil, fmt.Errorf("apply %s: %w: image %q: the instance has image %q; change it with `hostctl instance rebuild`", in.Name, part.ErrState, in.Image, old.Image)
		}
	}
	f, err := l.FlavorOf(ctx, in.Flavor)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	img, err := l.ImageOf(ctx, in.Image)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	var warn []string
	if f != nil && old != nil && !LaidOut(old) {
		// The instance was made from its spec alone (its flavor was only a
		// label then): a flavor registered since does not relayout or
		// re-encrypt its disks.
		if in.Flavor != old.Flavor {
			return nil, fmt.Errorf("apply %s: %w: flavor %q: the instance was created without a registered flavor; create a new instance to use one", in.Name, part.ErrState, in.Flavor)
		}
		warn = append(warn, fmt.Sprintf("flavor %q was registered after instance %s was created: the instance keeps its spec's disks and size", in.Flavor, in.Name))
		f = nil
	}
	if f == nil {
		if in.Flavor != "" && l.Flavors != nil && len(warn) == 0 {
			warn = append(warn, fmt.Sprintf("flavor %q is not a registered flavor: it is only reported as the instance type (hostctl flavor create registers one)", in.Flavor))
		}
		for i, d := range in.Disks {
			if d.Kind != "" {
				return nil, fmt.Errorf("apply %s: %w", in.Name, &model.SpecError{Errors: []model.FieldError{{
					Field: fmt.Sprintf("disks[%d].kind", i), Value: d.Kind, Rule: "only a registered flavor's disks have a kind (the spec names no registered flavor)"}}})
			}
		}
	} else if err := flavorDisks(in, f, img); err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	if err := l.Encryption.Decide(in, f, img); err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	return warn, nil
}

// EncryptAttached applies the instance's ephemeral encryption decision
// to a disk attached to it later: on an instance whose flavor or image
// asks for encryption, every new disk is encrypted too.
func (l *Layout) EncryptAttached(ctx context.Context, in *model.Instance, d *model.Disk) error {
	f, err := l.FlavorOf(ctx, in.Flavor)
	if err != nil {
		return err
	}
	if !LaidOut(in) {
		f = nil // its flavor is a label (registered later, if at all)
	}
	img, err := l.ImageOf(ctx, in.Image)
	if err != nil {
		return err
	}
	one := &model.Instance{Name: in.Name, Flavor: in.Flavor, Image: in.Image, Disks: []model.Disk{*d}}
	if err := l.Encryption.Decide(one, f, img); err != nil {
		return err
	}
	*d = one.Disks[0]
	return nil
}

// flavorDisks sets in's vCPUs, memory and local disks from the flavor f.
func flavorDisks(in *model.Instance, f *flavors.Flavor, img *images.Image) error {
	var errs []model.FieldError
	if in.VCPUs != 0 && in.VCPUs != f.VCPUs {
		errs = append(errs, model.FieldError{Field: "vcpus", Value: in.VCPUs, Rule: fmt.Sprintf("flavor %s has %d vCPUs (leave vcpus out)", f.Name, f.VCPUs)})
	}
	if in.MemoryMiB != 0 && in.MemoryMiB != f.RAM {
		errs = append(errs, model.FieldError{Field: "memory_mib", Value: in.MemoryMiB, Rule: fmt.Sprintf("flavor %s has %d MiB (leave memory_mib out)", f.Name, f.RAM)})
	}
	in.VCPUs, in.MemoryMiB = f.VCPUs, f.RAM

	var want []model.Disk // the flavor's disks, in Nova's order
	if in.Image != "" || f.Disk > 0 {
		root := model.Disk{Kind: model.DiskKindRoot}
		if f.Disk > 0 {
			root.Size = fmt.Sprintf("%dG", f.Disk)
			if img != nil && img.VirtualSize > int64(f.Disk)<<30 {
				errs = append(errs, model.FieldError{Field: "flavor", Value: f.Name, Rule: fmt.Sprintf(
					"its %d GiB root disk is smaller than image %s (%d bytes; Nova's FlavorDiskSmallerThanImage)", f.Disk, img.Name, img.VirtualSize)})
			}
		}
		want = append(want, root)
	}
	if f.Ephemeral > 0 {
		want = append(want, model.Disk{Kind: model.DiskKindEphemeral, Size: fmt.Sprintf("%dG", f.Ephemeral)})
	}
	if f.Swap > 0 {
		want = append(want, model.Disk{Kind: model.DiskKindSwap, Size: fmt.Sprintf("%dM", f.Swap)})
	}
	var others []model.Disk
	for i, d := range in.Disks {
		if d.Kind == "" {
			others = append(others, d)
			continue
		}
		j := slices.IndexFunc(want, func(w model.Disk) bool { return w.Kind == d.Kind })
		switch {
		case j < 0:
			errs = append(errs, model.FieldError{Field: fmt.Sprintf("disks[%d].kind", i), Value: d.Kind, Rule: fmt.Sprintf("flavor %s has no %s disk", f.Name, d.Kind)})
		case want[j].Name != "":
			errs = append(errs, model.FieldError{Field: fmt.Sprintf("disks[%d].kind", i), Value: d.Kind, Rule: "another disk of the spec has this kind"})
		case d.Size != "" && d.Size != want[j].Size:
			errs = append(errs, model.FieldError{Field: fmt.Sprintf("disks[%d].size", i), Value: d.Size, Rule: fmt.Sprintf("flavor %s sets the size of its %s disk (%s)", f.Name, d.Kind, orImage(want[j].Size))})
		default:
			size := want[j].Size
			want[j] = d
			want[j].Size = size
		}
	}
	if len(errs) > 0 {
		return &model.SpecError{Errors: errs}
	}
	used := map[string]bool{}
	for _, d := range append(slices.Clone(want), others...) {
		used[d.Name] = true
	}
	next := 'a'
	for i := range want {
		if want[i].Name != "" {
			continue
		}
		for used["vd"+string(next)] {
			next++
		}
		want[i].Name, want[i].Bus = "vd"+string(next), model.DiskBusVirtio
		used[want[i].Name] = true
	}
	in.Disks = append(want, others...)
	in.Normalize()
	return in.Validate()
}

func orImage(size string) string {
	if size == "" {
		return "the image's size"
	}
	return size
}

// DiskBytes is the size in bytes a disk's size field says, in qemu-img
// syntax ("10G", "512M", "1048576"; model.ParseDiskSize); false when it
// says none (the image's size) or is not one.
func DiskBytes(s string) (int64, bool) {
	n, err := model.ParseDiskSize(s)
	return n, err == nil
}

// LaidOut reports whether a stored instance was laid out by a
// registered flavor: its disks have kinds, or the flavor set its size
// (vcpus and memory_mib are new with flavors: older records have none).
func LaidOut(in *model.Instance) bool {
	return HasKinds(in) || in.Flavor != "" && in.VCPUs > 0 && in.MemoryMiB > 0
}

// HasKinds reports whether an instance's disks were laid out by a
// flavor (some disk has a kind).
func HasKinds(in *model.Instance) bool {
	return slices.ContainsFunc(in.Disks, func(d model.Disk) bool { return d.Kind != "" })
}

// BlankTemplate returns the blank-disk template of t a flavor's
// ephemeral or swap disk d is an overlay of, making it if t has none.
func BlankTemplate(ctx context.Context, t Templates, d model.Disk) (images.Base, error) {
	n, ok := DiskBytes(d.Size)
	switch {
	case d.Kind == model.DiskKindEphemeral && ok && n > 0 && n%(1<<30) == 0:
		return t.Template(ctx, images.TemplateEphemeral, int(n>>30))
	case d.Kind == model.DiskKindSwap && ok && n > 0 && n%(1<<20) == 0:
		return t.Template(ctx, images.TemplateSwap, int(n>>20))
	}
	return images.Base{}, fmt.Errorf("a %s disk of size %q has no blank template (whole GiB for ephemeral, MiB for swap)", d.Kind, d.Size)
}
