package layout

import (
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/model"
)

// Encryption is the ephemeral encryption decision a layout applies
// (Policy). A flavor or image that is nil is none registered: the
// instance's name of it is only a label.
type Encryption interface {
	// Decide sets the encryption requests of in's disks from its flavor
	// f and image img, refusing what they and the host cannot honour.
	Decide(in *model.Instance, f *flavors.Flavor, img *images.Image) error
	// SameForResize refuses a resize of old (image img) from flavor
	// oldF to newF whose encryption settings differ.
	SameForResize(old *model.Instance, oldF, newF *flavors.Flavor, img *images.Image) error
	// SameForRebuild refuses a rebuild of old (flavor f) from image
	// oldImg to newImg whose encryption settings differ.
	SameForRebuild(old *model.Instance, f *flavors.Flavor, oldImg, newImg *images.Image) error
}

// Policy is the ephemeral encryption policy (hostctl/encryption/policy)
// of a host that creates the formats Host names.
type Policy struct {
	Host policy.Host
}

var _ Encryption = Policy{}

// Decide applies the ephemeral encryption policy to in's disks.
func (p Policy) Decide(in *model.Instance, f *flavors.Flavor, img *images.Image) error {
	fs, err := flavorSettings(f, in.Flavor)
	if err != nil {
		return err
	}
	is, err := imageSettings(img, in.Image)
	if err != nil {
		return err
	}
	d, err := policy.Decide(fs, is, p.Host)
	if err != nil {
		return err
	}
	return d.Apply(in.Disks, p.Host)
}

// SameForResize is policy.SameForResize of the flavors' and the image's
// settings.
func (p Policy) SameForResize(old *model.Instance, oldF, newF *flavors.Flavor, img *images.Image) error {
	oldS, err := flavorSettings(oldF, old.Flavor)
	if err != nil {
		return err
	}
	newS, err := flavorSettings(newF, newF.Name)
	if err != nil {
		return err
	}
	imgS, err := imageSettings(img, old.Image)
	if err != nil {
		return err
	}
	return policy.SameForResize(oldS, newS, imgS, p.Host)
}

// SameForRebuild is policy.SameForRebuild of the flavor's and the
// images' settings.
func (p Policy) SameForRebuild(old *model.Instance, f *flavors.Flavor, oldImg, newImg *images.Image) error {
	fS, err := flavorSettings(f, old.Flavor)
	if err != nil {
		return err
	}
	oldS, err := imageSettings(oldImg, old.Image)
	if err != nil {
		return err
	}
	newS, err := imageSettings(newImg, newImg.Name)
	if err != nil {
		return err
	}
	return policy.SameForRebuild(fS, oldS, newS, p.Host)
}

func flavorSettings(f *flavors.Flavor, name string) (policy.Settings, error) {
	if f == nil {
		return policy.FlavorSettings(name, nil)
	}
	return policy.FlavorSettings(f.Name, f.ExtraSpecs)
}

func imageSettings(img *images.Image, name string) (policy.Settings, error) {
	if img == nil {
		return policy.ImageSettings(name, nil)
	}
	return policy.ImageSettings(img.Name, img.Properties)
}
