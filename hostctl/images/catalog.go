package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// The image directory as a catalog (Glance, made small): each imported
// image is a file NAME.<format> with a JSON sidecar NAME.json holding
// what qemu-img said of it and its properties. A file put into the
// directory by hand (debian-12.qcow2) is a legacy image: instances may
// name it, it has no properties.

// sidecarExt ends a sidecar's name.
const sidecarExt = ".json"

// importFormats are the formats an imported image may have: what hostctl
// makes overlays of (a raw LUKS file is "luks").
var importFormats = []string{"qcow2", "raw", "luks"}

// legacyExts are the extensions Lookup tries after the bare name.
var legacyExts = []string{".qcow2", ".img", ".raw"}

// imageNameRE: a file name, starting with a letter or digit.
var imageNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// CheckName checks an image name for import.
func CheckName(name string) error {
	switch {
	case !imageNameRE.MatchString(name):
		return errors.New("must be 1 to 128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit")
	case strings.HasSuffix(name, sidecarExt):
		return fmt.Errorf("must not end in %s (the sidecars' extension)", sidecarExt)
	}
	return nil
}

func (d *Dir) sidecar(name string) string { return filepath.Join(d.path, name+sidecarExt) }

// info is what qemu-img info says of a file.
type info struct {
	Format          string `json:"format"`
	VirtualSize     int64  `json:"virtual-size"`
	ActualSize      int64  `json:"actual-size"`
	Encrypted       bool   `json:"encrypted"`
	BackingFilename string `json:"backing-filename"`
	FormatSpecific  struct {
		Data struct {
			DataFile string `json:"data-file"`
		} `json:"data"`
	} `json:"format-specific"`
}

func (d *Dir) info(ctx context.Context, path string) (info, error) {
	out, err := exec.CommandContext(ctx, d.qemuImg, "info", "--output=json", "-U", path).Output()
	if err != nil {
		return info{}, fmt.Errorf("qemu-img info: %w%s", err, stderrOf(err))
	}
	var in info
	if err := json.Unmarshal(out, &in); err != nil || in.Format == "" {
		return info{}, fmt.Errorf("qemu-img info: no format in %q", out)
	}
	return in, nil
}

// Import reads an image from r into the image directory as name, with
// its properties, and returns it. The properties are checked first
// (unknown ones are kept; a malformed known one is a field error naming
// its key), then the file is written under a temporary name, asked
// qemu-img what it is (qcow2, raw or raw LUKS; no backing file, no
// external data file; encrypted exactly when os_encrypt_key_id is set),
// and only then put in place with its sidecar. An image of that name
// (imported or legacy) is ErrConflict. Nothing is left behind on error.
func (d *Dir) Import(ctx context.Context, name string, props map[string]string, r io.Reader) (Image, error) {
	return d.ImportVerified(ctx, name, props, r, nil)
}

// VerifyFunc checks an imported file (its temporary path and the format
// qemu-img found) before it is kept: an encrypted one opens with its
// secret's passphrase. Its error refuses the import.
type VerifyFunc func(ctx context.Context, path, format string) error

// ImportVerified is Import with a check of the file, run (when verify is
// not nil) on an encrypted image after qemu-img's checks passed and before
// anything is put in place.
func (d *Dir) ImportVerified(ctx context.Context, name string, props map[string]string, r io.Reader, verify VerifyFunc) (_ Image, err error) {
	if err := CheckName(name); err != nil {
		return Image{}, &model.SpecError{Errors: []model.FieldError{{Field: "name", Value: name, Rule: err.Error()}}, Of: "image"}
	}
	if errs := policy.CheckImageProperties("properties", props); len(errs) > 0 {
		return Image{}, fmt.Errorf("import image %s: %w", name, &model.SpecError{Errors: errs, Of: "image"})
	}
	defer d.locks.Lock(name)()
	if err := d.free(name); err != nil {
		return Image{}, err
	}
	if err := os.MkdirAll(d.path, 0o750); err != nil {
		return Image{}, fmt.Errorf("import image %s: %w", name, err)
	}
	// Under the name's lock, a temporary file of an import of this name
	// is a crashed import's: it goes.
	// (os.CreateTemp's random part is digits: ".import-deb-2-…" is
	// another name's.)
	prefix := ".import-" + name + "-"
	if stale, _ := filepath.Glob(filepath.Join(d.path, prefix+"*")); len(stale) > 0 {
		for _, p := range stale {
			if rest := strings.TrimPrefix(filepath.Base(p), prefix); rest != "" && strings.Trim(rest, "0123456789") == "" {
				_ = os.Remove(p)
			}
		}
	}
	// The file is staged (atomicfile): its name depends on the format
	// qemu-img finds in it.
	tmp, err := atomicfile.Stage(d.path, prefix+"*", 0o600)
	if err != nil {
		return Image{}, fmt.Errorf("import image %s: %w", name, err)
	}
	defer tmp.Abort()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp.File(), h), r); err != nil {
		return Image{}, fmt.Errorf("import image %s: read: %w", name, err)
	}
	if err := tmp.Finish(); err != nil {
		return Image{}, fmt.Errorf("import image %s: %w", name, err)
	}
	in, err := d.info(ctx, tmp.Name())
	if err != nil {
		return Image{}, fmt.Errorf("import image %s: %w", name, err)
	}
	if err := checkImported(in, props); err != nil {
		return Image{}, fmt.Errorf("import image %s: %w", name, err)
	}
	if verify != nil && in.Encrypted {
		if err := verify(ctx, tmp.Name(), in.Format); err != nil {
			return Image{}, fmt.Errorf("import image %s: %w", name, err)
		}
	}
	img := Image{
		Name: name, File: name + "." + in.Format, Format: in.Format, VirtualSize: in.VirtualSize,
		Encrypted: in.Encrypted, Checksum: hex.EncodeToString(h.Sum(nil)), Properties: props,
		Created: time.Now().UTC().Truncate(time.Second),
	}
	if fi, err := os.Stat(tmp.Name()); err == nil {
		img.Size = fi.Size()
	}
	if len(img.Properties) == 0 {
		img.Properties = nil
	}
	final := filepath.Join(d.path, img.File)
	// Exclusive: it fails rather than replace a file that appeared.
	if err := tmp.CommitExclusive(final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return Image{}, fmt.Errorf("import image %s: %w: %s exists in the image directory", name, store.ErrConflict, img.File)
		}
		return Image{}, fmt.Errorf("import image %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			os.Remove(final)
		}
	}()
	side, err := encodeSidecar(img)
	if err != nil {
		return Image{}, err
	}
	if err := atomicfile.CreateExclusive(d.sidecar(name), side, 0o640); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return Image{}, fmt.Errorf("import image %s: %w: it exists", name, store.ErrConflict)
		}
		return Image{}, fmt.Errorf("import image %s: write sidecar: %w", name, err)
	}
	return img, nil
}

// free refuses a name an image (imported or legacy) already has.
func (d *Dir) free(name string) error {
	if _, err := os.Stat(d.sidecar(name)); err == nil {
		return fmt.Errorf("import image %s: %w: an image of that name exists", name, store.ErrConflict)
	}
	if p, err := d.resolve(name); err == nil {
		return fmt.Errorf("import image %s: %w: the image directory has %s, which instances naming %q use", name, store.ErrConflict, filepath.Base(p), name)
	}
	return nil
}

// checkImported checks what qemu-img found against the properties.
func checkImported(in info, props map[string]string) error {
	var errs []model.FieldError
	switch {
	case !slices.Contains(importFormats, in.Format):
		errs = append(errs, model.FieldError{Field: "file", Value: in.Format, Rule: "qemu-img finds this format; import qcow2 or raw images (convert with qemu-img convert -O qcow2)"})
	case in.BackingFilename != "":
		errs = append(errs, model.FieldError{Field: "file", Value: in.BackingFilename, Rule: "the image has a backing file; import a self-contained image (qemu-img convert flattens it)"})
	case in.FormatSpecific.Data.DataFile != "":
		errs = append(errs, model.FieldError{Field: "file", Value: in.FormatSpecific.Data.DataFile, Rule: "the image has an external data file; import a self-contained image"})
	}
	keyID, encrypted := props[policy.ImageEncryptKeyID]
	switch {
	case in.Encrypted && !encrypted:
		errs = append(errs, model.FieldError{Field: "properties[" + policy.ImageEncryptKeyID + "]", Rule: "qemu-img finds the file encrypted: an encrypted image names its secret in " + policy.ImageEncryptKeyID})
	case !in.Encrypted && encrypted:
		errs = append(errs, model.FieldError{Field: "properties[" + policy.ImageEncryptKeyID + "]", Value: keyID, Rule: "qemu-img finds the file not encrypted: only an encrypted image has a key"})
	}
	if len(errs) > 0 {
		return &model.SpecError{Errors: errs, Of: "image"}
	}
	return nil
}

// Get returns an image by name: an imported one from its sidecar, else a
// legacy file as qemu-img sees it. ErrNotFound when there is none.
func (d *Dir) Get(ctx context.Context, name string) (Image, error) {
	if CheckName(name) != nil && d.checkLegacyName(name) != nil {
		return Image{}, fmt.Errorf("image %q: %w", name, store.ErrNotFound)
	}
	b, err := os.ReadFile(d.sidecar(name))
	switch {
	case err == nil:
		img, err := decodeSidecar(b)
		if err != nil {
			return Image{}, fmt.Errorf("image %s: sidecar %s: %w", name, d.sidecar(name), err)
		}
		return img, nil
	case !errors.Is(err, fs.ErrNotExist):
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	p, err := d.resolve(name)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, store.ErrNotFound)
	}
	return d.legacy(ctx, name, p)
}

func (d *Dir) checkLegacyName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return errors.New("not a file name")
	}
	return nil
}

func (d *Dir) legacy(ctx context.Context, name, path string) (Image, error) {
	img := Image{Name: name, File: filepath.Base(path), Legacy: true}
	if fi, err := os.Stat(path); err == nil {
		img.Size = fi.Size()
		img.Created = fi.ModTime().UTC().Truncate(time.Second)
	}
	in, err := d.info(ctx, path)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	img.Format, img.VirtualSize, img.Encrypted = in.Format, in.VirtualSize, in.Encrypted
	return img, nil
}

// List returns every image, imported and legacy, sorted by name.
func (d *Dir) List(ctx context.Context) ([]Image, error) {
	ents, err := os.ReadDir(d.path)
	if errors.Is(err, fs.ErrNotExist) {
		return []Image{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	out := []Image{}
	owned := map[string]bool{}
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), sidecarExt); ok && e.Type().IsRegular() && !strings.HasPrefix(n, ".") {
			img, err := d.Get(ctx, n)
			if err != nil {
				return nil, err
			}
			owned[img.File] = true
			out = append(out, img)
		}
	}
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(n, ".") || strings.HasSuffix(n, sidecarExt) || owned[n] {
			continue
		}
		name := n
		for _, ext := range legacyExts {
			if base, ok := strings.CutSuffix(n, ext); ok && base != "" {
				name = base
				break
			}
		}
		// The name Lookup resolves to this file (a bare name wins).
		if p, err := d.resolve(name); err != nil || filepath.Base(p) != n {
			name = n
		}
		img, err := d.legacy(ctx, name, filepath.Join(d.path, n))
		if err != nil {
			img = Image{Name: name, File: n, Legacy: true}
		}
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b Image) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete removes an image (its sidecar first, then its file) unless
// inUse names instances that use it (ErrConflict naming them). It waits
// for applies that hold the image (Use) to finish first.
func (d *Dir) Delete(ctx context.Context, name string, inUse func(ctx context.Context) ([]string, error)) error {
	defer d.locks.Lock(name)()
	defer d.exclusive(name)()
	img, err := d.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("delete %w", err)
	}
	if inUse != nil {
		users, err := inUse(ctx)
		if err != nil {
			return fmt.Errorf("delete image %s: %w", name, err)
		}
		if len(users) > 0 {
			return fmt.Errorf("delete image %s: %w: in use by instance(s) %s", name, store.ErrConflict, strings.Join(users, ", "))
		}
	}
	if !img.Legacy {
		if err := os.Remove(d.sidecar(name)); err != nil {
			return fmt.Errorf("delete image %s: %w", name, err)
		}
	}
	if err := removeIfExists(filepath.Join(d.path, img.File)); err != nil {
		return fmt.Errorf("delete image %s: %w", name, err)
	}
	return atomicfile.SyncDir(d.path)
}

func removeIfExists(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// NamingSecret returns the imported images whose os_encrypt_key_id is the
// secret id, sorted (read from their sidecars; a legacy image names no
// secret). A sidecar that does not decode is an error: the image may name
// the secret, and a caller deleting it must not guess.
func (d *Dir) NamingSecret(ctx context.Context, id string) ([]string, error) {
	ents, err := os.ReadDir(d.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("images naming secret %s: %w", id, err)
	}
	var out []string
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), sidecarExt)
		if !ok || !e.Type().IsRegular() || strings.HasPrefix(n, ".") || CheckName(n) != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(d.sidecar(n))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("images naming secret %s: %w", id, err)
		}
		img, err := decodeSidecar(b)
		if err != nil {
			return nil, fmt.Errorf("images naming secret %s: sidecar %s: %w", id, d.sidecar(n), err)
		}
		if img.Properties[policy.ImageEncryptKeyID] == id {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}
