// Package policy decides whether and how an instance's local disks
// are encrypted at rest, as the ephemeral storage encryption
// specification says: a flavor's extra specs (hw:ephemeral_encryption,
// hw:ephemeral_encryption_format) and an image's properties
// (hw_ephemeral_encryption, hw_ephemeral_encryption_format, and the
// os_encrypt_* properties of an encrypted image) ask for it, and the host
// says which formats it supports and which one is its default.
//
// Everything here is pure: it reads properties and returns a decision or
// a conflict (an error wrapping store.ErrConflict, a 409 at the API,
// naming both sides). The decision becomes a per-disk request
// (model.Disk Encrypted and EncryptionFormat) that hostctl turns into
// encrypted disks; what the guest is told comes only from what hostctl
// created and verified.
package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Host is what this host brings to the decision.
type Host struct {
	// Formats are the formats this host can create (hostctl serve
	// --ephemeral-encryption-formats).
	Formats []string
	// DefaultFormat is the format used when neither the flavor, nor the
	// image, nor an encrypted source image names one
	// ([ephemeral_storage_encryption]/default_format; hostctl serve
	// --ephemeral-encryption-default-format).
	DefaultFormat string
}

// Decision is whether an instance's local disks are encrypted, in which
// format, and why.
type Decision struct {
	Encrypt bool
	// Format is set when Encrypt is.
	Format string
	// Why names what turned encryption on (or "" when off); FormatFrom
	// what chose the format.
	Why, FormatFrom string
	// Off names the side that explicitly asked for no encryption ("" when
	// none did): a disk of the spec may then not ask for it either.
	Off string
}

// String is "unencrypted" or "encrypted (luks)".
func (d Decision) String() string {
	if !d.Encrypt {
		return "unencrypted"
	}
	return "encrypted (" + d.Format + ")"
}

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %s", store.ErrConflict, fmt.Sprintf(format, args...))
}

// Decide applies the specification's rules:
//
//   - encryption is on when the flavor or the image asks for it, or when
//     the source image is encrypted (os_encrypt_key_id is set: an instance
//     is never silently decrypted);
//   - the format is the one the flavor or the image names, else the
//     encrypted source image's os_encrypt_format, else the host default;
//     a format named without encryption being on turns nothing on;
//   - it is a conflict when the flavor and the image disagree on
//     encryption or on the format, when an encrypted source image meets
//     an explicit false, and when the format is not one this host
//     supports.
func Decide(flavor, image Settings, host Host) (Decision, error) {
	if flavor.Encrypt != nil && image.Encrypt != nil && *flavor.Encrypt != *image.Encrypt {
		return Decision{}, conflict("%s (%s) and %s (%s) disagree on ephemeral encryption", flavor.Source, flavor, image.Source, image)
	}
	if flavor.Format != "" && image.Format != "" && flavor.Format != image.Format {
		return Decision{}, conflict("%s (%s) and %s (%s) disagree on the ephemeral encryption format", flavor.Source, flavor, image.Source, image)
	}
	var d Decision
	for _, s := range []Settings{flavor, image} {
		if s.Encrypt != nil && !*s.Encrypt {
			d.Off = fmt.Sprintf("%s (%s=false)", s.Source, s.encKey)
			if image.KeyID != "" {
				return Decision{}, conflict("%s is encrypted (%s=%s) and %s says %s=false: an instance of an encrypted image is encrypted too",
					image.Source, ImageEncryptKeyID, image.KeyID, s.Source, s.encKey)
			}
		}
	}
	switch {
	case flavor.Encrypt != nil && *flavor.Encrypt:
		d.Encrypt, d.Why = true, fmt.Sprintf("%s (%s=true)", flavor.Source, flavor.encKey)
	case image.Encrypt != nil && *image.Encrypt:
		d.Encrypt, d.Why = true, fmt.Sprintf("%s (%s=true)", image.Source, image.encKey)
	case image.KeyID != "":
		d.Encrypt, d.Why = true, fmt.Sprintf("%s is encrypted (%s=%s)", image.Source, ImageEncryptKeyID, image.KeyID)
	default:
		return d, nil
	}
	switch {
	case flavor.Format != "":
		d.Format, d.FormatFrom = flavor.Format, fmt.Sprintf("%s (%s=%s)", flavor.Source, flavor.fmtKey, flavor.Format)
	case image.Format != "":
		d.Format, d.FormatFrom = image.Format, fmt.Sprintf("%s (%s=%s)", image.Source, image.fmtKey, image.Format)
	case image.KeyID != "" && image.SourceFormat != "":
		d.Format, d.FormatFrom = image.SourceFormat, fmt.Sprintf("%s (%s=%s)", image.Source, ImageEncryptFormat, image.SourceFormat)
	default:
		d.Format, d.FormatFrom = host.DefaultFormat, "this host's default format"
	}
	if !slices.Contains(host.Formats, d.Format) {
		return Decision{}, conflict("ephemeral encryption format %q, from %s, is not supported by this host (it supports: %s)",
			d.Format, d.FormatFrom, formatList(host.Formats))
	}
	return d, nil
}

func formatList(fs []string) string {
	if len(fs) == 0 {
		return "none"
	}
	return strings.Join(fs, ", ")
}

// Apply turns the decision into per-disk requests on the local disks of
// an instance (every disk hostctl creates for it is local storage):
// with encryption on, every disk is asked to be encrypted in the
// decided format, and a disk that names another format, or whose spec
// says encrypted: false (model.Disk.Unencrypted), is a conflict;
// with encryption off, disks keep what the spec asked of them, except
// that a side's explicit false refuses a disk asking for encryption, and
// a format this host does not support is refused.
func (d Decision) Apply(disks []model.Disk, host Host) error {
	for i := range disks {
		disk := &disks[i]
		switch {
		case d.Encrypt:
			if disk.Unencrypted {
				// The specification's rule: an explicit false under an
				// encrypting flavor or image is a conflict, never overridden.
				return conflict("disks[%d] (%s) says encrypted=false, and %s says encrypted=true: an explicit false is not overridden (leave encrypted out, or use a flavor and image without ephemeral encryption)",
					i, disk.Name, d.Why)
			}
			if disk.EncryptionFormat != "" && disk.EncryptionFormat != d.Format {
				return conflict("disks[%d] (%s) asks for encryption format %q, and %s chose %q", i, disk.Name, disk.EncryptionFormat, d.FormatFrom, d.Format)
			}
			disk.Encrypted, disk.EncryptionFormat = true, d.Format
		case disk.Encrypted || disk.EncryptionFormat != "":
			if d.Off != "" {
				return conflict("disks[%d] (%s) asks for encryption at rest, and %s says no", i, disk.Name, d.Off)
			}
			if disk.EncryptionFormat != "" && !slices.Contains(host.Formats, disk.EncryptionFormat) {
				return conflict("disks[%d] (%s): ephemeral encryption format %q is not supported by this host (it supports: %s)",
					i, disk.Name, disk.EncryptionFormat, formatList(host.Formats))
			}
		}
	}
	return nil
}

// SameForResize refuses a resize from one flavor to another when the
// instance's encryption would change (on/off or format): converting the
// disks in place is not supported, as the specification says. image is
// the instance's image.
func SameForResize(oldFlavor, newFlavor, image Settings, host Host) error {
	before, errOld := Decide(oldFlavor, image, host)
	after, err := Decide(newFlavor, image, host)
	if err != nil {
		return err
	}
	if errOld == nil && (before.Encrypt != after.Encrypt || before.Format != after.Format) {
		return conflict("%s (%s: %s) and %s (%s: %s) differ in ephemeral encryption; a resize cannot convert the disks",
			oldFlavor.Source, oldFlavor, before, newFlavor.Source, newFlavor, after)
	}
	return nil
}

// asks is whether a side asks for encryption (unset is no).
func asks(s Settings) bool { return s.Encrypt != nil && *s.Encrypt }

// SameForRebuild refuses a rebuild onto an image whose encryption
// settings differ from the current image's (the disks' secrets and
// formats would change under the instance), as the specification says.
func SameForRebuild(flavor, oldImage, newImage Settings, host Host) error {
	before, errOld := Decide(flavor, oldImage, host)
	after, err := Decide(flavor, newImage, host)
	if err != nil {
		return err
	}
	if errOld == nil && (before.Encrypt != after.Encrypt || before.Format != after.Format) {
		return conflict("%s (%s: %s) and %s (%s: %s) differ in ephemeral encryption; a rebuild keeps the instance's encryption",
			oldImage.Source, oldImage, before, newImage.Source, newImage, after)
	}
	if asks(oldImage) != asks(newImage) || oldImage.Format != newImage.Format ||
		(oldImage.KeyID != "") != (newImage.KeyID != "") || oldImage.KeyID != "" && oldImage.SourceFormat != newImage.SourceFormat {
		return conflict("%s (%s) and %s (%s) differ in their ephemeral encryption settings", oldImage.Source, oldImage, newImage.Source, newImage)
	}
	return nil
}
