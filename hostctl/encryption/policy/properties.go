package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/uuid"
)

// The flavor extra specs and image properties that ask for ephemeral
// storage encryption (the specification's names), and the Glance image
// properties of an encrypted image.
const (
	FlavorEncryption       = "hw:ephemeral_encryption"
	FlavorEncryptionFormat = "hw:ephemeral_encryption_format"

	ImageEncryption       = "hw_ephemeral_encryption"
	ImageEncryptionFormat = "hw_ephemeral_encryption_format"

	ImageEncryptFormat         = "os_encrypt_format"
	ImageEncryptKeyID          = "os_encrypt_key_id"
	ImageEncryptCipher         = "os_encrypt_cipher"
	ImageEncryptKeyDeletion    = "os_encrypt_key_deletion_policy"
	ImageDecryptContainerFormt = "os_decrypt_container_format"
	ImageDecryptSize           = "os_decrypt_size"
)

// Encryption formats (Nova's BlockDeviceEncryptionFormatType values).
const (
	FormatLUKS   = "luks"
	FormatLUKSv2 = "luksv2"
	FormatPlain  = "plain"
)

// Formats are the encryption formats a flavor or an image may name; a
// host supports some of them (hostctl serve
// --ephemeral-encryption-formats).
var Formats = []string{FormatLUKS, FormatLUKSv2, FormatPlain}

// Image key deletion policies (os_encrypt_key_deletion_policy).
const (
	KeyDeletionOnImageDeletion = "on_image_deletion"
	KeyDeletionDoNotDelete     = "do_not_delete"
)

var keyDeletionPolicies = []string{KeyDeletionOnImageDeletion, KeyDeletionDoNotDelete}

// Glance's container formats (os_decrypt_container_format).
var containerFormats = []string{"bare", "ovf", "aki", "ari", "ami", "ova", "docker", "compressed"}

// Limits of property keys and values (Glance and Nova: 255 each).
const (
	MaxKeyLen   = 255
	MaxValueLen = 255
)

// ParseBool parses a boolean as Nova's ecosystem does (oslo.utils
// bool_from_string, strict): after trimming spaces and ignoring case,
// 1, t, true, on, y, yes are true and 0, f, false, off, n, no are false;
// anything else is an error.
func ParseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "on", "y", "yes":
		return true, nil
	case "0", "f", "false", "off", "n", "no":
		return false, nil
	}
	return false, fmt.Errorf("must be a boolean (true/false, yes/no, on/off, 1/0, any case)")
}

// ParseProperty splits a KEY=VALUE argument (--property) at its first
// "=".
func ParseProperty(arg string) (key, value string, err error) {
	k, v, ok := strings.Cut(arg, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("%q: must be KEY=VALUE", arg)
	}
	return k, v, nil
}

// checkKeyValue checks the shape every property shares: a key of 1 to
// MaxKeyLen characters without control characters, a value of at most
// MaxValueLen characters without control characters.
func checkKeyValue(field, key, value string) []model.FieldError {
	var errs []model.FieldError
	switch {
	case key == "" || len(key) > MaxKeyLen:
		errs = append(errs, model.FieldError{Field: field, Value: key, Rule: fmt.Sprintf("key must be 1 to %d bytes", MaxKeyLen)})
	case hasControl(key):
		errs = append(errs, model.FieldError{Field: field, Value: key, Rule: "key must not contain control characters"})
	}
	switch {
	case len(value) > MaxValueLen:
		errs = append(errs, model.FieldError{Field: field, Value: value, Rule: fmt.Sprintf("value must be at most %d bytes", MaxValueLen)})
	case hasControl(value):
		errs = append(errs, model.FieldError{Field: field, Value: value, Rule: "value must not contain control characters"})
	}
	return errs
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// checker validates the value of one known key.
type checker func(value string) error

func boolValue(v string) error { _, err := ParseBool(v); return err }

func oneOf(allowed []string) checker {
	return func(v string) error {
		if !slices.Contains(allowed, v) {
			return fmt.Errorf("must be one of %s", strings.Join(allowed, ", "))
		}
		return nil
	}
}

func uuidValue(v string) error {
	if !uuid.Valid(v) {
		return fmt.Errorf("must be a UUID (8-4-4-4-12 hex digits)")
	}
	return nil
}

func nonEmpty(v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("must not be empty")
	}
	return nil
}

func sizeValue(v string) error {
	if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
		return fmt.Errorf("must be a size in bytes (a non-negative integer)")
	}
	return nil
}

var flavorKeys = map[string]checker{
	FlavorEncryption:       boolValue,
	FlavorEncryptionFormat: oneOf(Formats),
}

var imageKeys = map[string]checker{
	ImageEncryption:            boolValue,
	ImageEncryptionFormat:      oneOf(Formats),
	ImageEncryptFormat:         oneOf(Formats),
	ImageEncryptKeyID:          uuidValue,
	ImageEncryptCipher:         nonEmpty,
	ImageEncryptKeyDeletion:    oneOf(keyDeletionPolicies),
	ImageDecryptContainerFormt: oneOf(containerFormats),
	ImageDecryptSize:           sizeValue,
}

// CheckFlavorSpecs checks a flavor's extra specs: every key and value
// has the shape properties share, and the keys this package knows have
// well-formed values. Unknown keys are kept (not an error). The field
// errors are named field[KEY].
func CheckFlavorSpecs(field string, specs map[string]string) []model.FieldError {
	return check(field, specs, flavorKeys)
}

// CheckImageProperties is CheckFlavorSpecs for an image's properties;
// it also refuses os_encrypt_* and os_decrypt_* properties without
// os_encrypt_key_id (they describe an encrypted image, and an image is
// encrypted when it names its key).
func CheckImageProperties(field string, props map[string]string) []model.FieldError {
	errs := check(field, props, imageKeys)
	if _, ok := props[ImageEncryptKeyID]; !ok {
		for _, k := range sortedKeys(props) {
			if k != ImageEncryptKeyID && (strings.HasPrefix(k, "os_encrypt_") || strings.HasPrefix(k, "os_decrypt_")) && imageKeys[k] != nil {
				errs = append(errs, model.FieldError{Field: fmt.Sprintf("%s[%s]", field, k), Value: props[k],
					Rule: "describes an encrypted image: it needs " + ImageEncryptKeyID + " (the image's secret)"})
			}
		}
	}
	return errs
}

func check(field string, props map[string]string, known map[string]checker) []model.FieldError {
	var errs []model.FieldError
	for _, k := range sortedKeys(props) {
		v := props[k]
		f := fmt.Sprintf("%s[%s]", field, k)
		if e := checkKeyValue(f, k, v); len(e) > 0 {
			errs = append(errs, e...)
			continue
		}
		if c := known[k]; c != nil {
			if err := c(v); err != nil {
				errs = append(errs, model.FieldError{Field: f, Value: v, Rule: err.Error()})
			}
		}
	}
	return errs
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Settings are what one side (a flavor or an image) says about ephemeral
// encryption.
type Settings struct {
	// Source names the side for messages: `flavor "m1.enc"`.
	Source string
	// Encrypt is the boolean property; nil when not set.
	Encrypt *bool
	// Format is the format property; empty when not set.
	Format string
	// KeyID is the image's os_encrypt_key_id: the source image is
	// encrypted (images only).
	KeyID string
	// SourceFormat is the image's os_encrypt_format (images only).
	SourceFormat string

	encKey, fmtKey string
}

// FlavorSettings reads a flavor's extra specs (checked by
// CheckFlavorSpecs; an unparsable value is an error naming the key).
func FlavorSettings(name string, specs map[string]string) (Settings, error) {
	s := Settings{Source: fmt.Sprintf("flavor %q", name), Format: specs[FlavorEncryptionFormat],
		encKey: FlavorEncryption, fmtKey: FlavorEncryptionFormat}
	if v, ok := specs[FlavorEncryption]; ok {
		b, err := ParseBool(v)
		if err != nil {
			return Settings{}, fmt.Errorf("%s: %s: %q: %w", s.Source, FlavorEncryption, v, err)
		}
		s.Encrypt = &b
	}
	return s, nil
}

// ImageSettings reads an image's properties (checked by
// CheckImageProperties).
func ImageSettings(name string, props map[string]string) (Settings, error) {
	s := Settings{Source: fmt.Sprintf("image %q", name), Format: props[ImageEncryptionFormat],
		KeyID: props[ImageEncryptKeyID], SourceFormat: props[ImageEncryptFormat],
		encKey: ImageEncryption, fmtKey: ImageEncryptionFormat}
	if v, ok := props[ImageEncryption]; ok {
		b, err := ParseBool(v)
		if err != nil {
			return Settings{}, fmt.Errorf("%s: %s: %q: %w", s.Source, ImageEncryption, v, err)
		}
		s.Encrypt = &b
	}
	return s, nil
}

// String writes the settings as properties, for messages:
// `hw:ephemeral_encryption=true, hw:ephemeral_encryption_format=luks`,
// or "no ephemeral encryption settings".
func (s Settings) String() string {
	encKey, fmtKey := s.encKey, s.fmtKey
	if encKey == "" {
		encKey, fmtKey = "encryption", "format"
	}
	var parts []string
	if s.Encrypt != nil {
		parts = append(parts, fmt.Sprintf("%s=%t", encKey, *s.Encrypt))
	}
	if s.Format != "" {
		parts = append(parts, fmt.Sprintf("%s=%s", fmtKey, s.Format))
	}
	if s.KeyID != "" {
		parts = append(parts, fmt.Sprintf("%s=%s", ImageEncryptKeyID, s.KeyID))
	}
	if s.SourceFormat != "" {
		parts = append(parts, fmt.Sprintf("%s=%s", ImageEncryptFormat, s.SourceFormat))
	}
	if len(parts) == 0 {
		return "no ephemeral encryption settings"
	}
	return strings.Join(parts, ", ")
}
