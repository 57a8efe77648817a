// Package encryption makes and checks the encrypted disks of instances:
// qcow2 images with LUKS encryption (encrypt.format=luks) created by
// qemu-img, their headers read back with `qemu-img info`, and their
// passphrases proven by opening them with qemu-io. Passphrases reach
// qemu-img and qemu-io through a pipe (--object secret,file=/dev/fd/3),
// never on a command line, in the environment or in a file.
//
// Probe finds out which encryption formats this host can really make and
// open (qemu-img, QEMU, cryptsetup), for the COMPUTE_EPHEMERAL_ENCRYPTION
// traits and the encryption policy.
package encryption

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// FormatLUKS is the LUKS (version 1) format qemu-img writes.
const FormatLUKS = "luks"

// ErrWrongPassphrase: the passphrase does not unlock any keyslot.
var ErrWrongPassphrase = errors.New("passphrase does not unlock the disk")

// Options configure a Tool.
type Options struct {
	// QemuImg and QemuIO are the binaries; from PATH when empty.
	QemuImg, QemuIO string
	// IterTime is the PBKDF iteration time of new LUKS keyslots
	// (encrypt.iter-time); QEMU's default (2 s) when 0.
	IterTime time.Duration
}

// Tool creates and checks LUKS disks.
type Tool struct {
	qemuImg, qemuIO string
	iterTime        time.Duration
}

// New returns a Tool.
func New(opts Options) *Tool {
	t := &Tool{qemuImg: opts.QemuImg, qemuIO: opts.QemuIO, iterTime: opts.IterTime}
	if t.qemuImg == "" {
		t.qemuImg = "qemu-img"
	}
	if t.qemuIO == "" {
		t.qemuIO = "qemu-io"
	}
	return t
}

// IterTime is the PBKDF iteration time new keyslots get (0: QEMU's
// default).
func (t *Tool) IterTime() time.Duration { return t.iterTime }

// Base is a disk's backing file: plain (a blank template, a plain
// image) or, for an overlay of an encrypted image, a LUKS qcow2 whose
// own passphrase is needed to read through the overlay (qemu-img create
// opens the backing file without I/O, so only Verify and Resize ask for
// it).
type Base struct {
	Path, Format string
}

// Disk is an encrypted disk to create.
type Disk struct {
	// Path of the new image; it must not exist.
	Path string
	// Size in qemu-img syntax; the base's size when empty.
	Size string
	// Base, when set, is the overlay's backing file.
	Base *Base
}

// createAttempts bounds qemu-img create retries after QEMU's PBKDF
// benchmark could not measure its own CPU time ("Unable to get accurate
// CPU usage": on a busy host getrusage(RUSAGE_THREAD) may report no time
// for a short benchmark round; the error is QEMU's, the disk is not made).
// Measured on the CI machine (QEMU 7.2, 2 cores, lightly loaded): 18 of
// 30 `qemu-img create` and 9 of 30 `qemu-img convert` with LUKS failed
// so, independently of each other; a failed attempt costs milliseconds,
// so the bound is high enough that a test making hundreds of disks does
// not meet it (0.6^64).
const createAttempts = 64

// Create creates a qcow2 image encrypted with LUKS under pass. A failure
// may leave a partial file at d.Path: the caller removes it.
func (t *Tool) Create(ctx context.Context, d Disk, pass []byte) error {
	opts := "encrypt.format=luks,encrypt.key-secret=sec0"
	if t.iterTime > 0 {
		opts += ",encrypt.iter-time=" + strconv.FormatInt(t.iterTime.Milliseconds(), 10)
	}
	args := []string{"create", "-q", "-f", "qcow2", "--object", "secret,id=sec0,file=/dev/fd/3", "-o", opts}
	if d.Base != nil {
		args = append(args, "-b", d.Base.Path, "-F", d.Base.Format)
	}
	args = append(args, d.Path)
	if d.Size != "" {
		args = append(args, d.Size)
	}
	var err error
	for range createAttempts {
		if err = runWithSecret(ctx, t.qemuImg, args, pass); err == nil || !strings.Contains(err.Error(), "Unable to get accurate CPU usage") {
			break
		}
		if rerr := os.Remove(d.Path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("%w (and removing the partial file: %w)", err, rerr)
		}
	}
	return err
}

// runWithSecret runs bin with args, the secret readable on fd 3 (a pipe
// written whole and closed before the command starts).
func runWithSecret(ctx context.Context, bin string, args []string, secret []byte) error {
	return runWithSecrets(ctx, bin, args, secret)
}

// runWithSecrets runs bin with args, the i-th secret readable on fd 3+i
// (pipes written whole and closed before the command starts).
func runWithSecrets(ctx context.Context, bin string, args []string, secrets ...[]byte) error {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, secret := range secrets {
		// A pipe holds 64 KiB before a write blocks; a passphrase is far less.
		if len(secret) > 60<<10 {
			return fmt.Errorf("%s: secret of %d bytes is too long", bin, len(secret))
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("%s: pipe: %w", bin, err)
		}
		files = append(files, r)
		_, werr := w.Write(secret)
		cerr := w.Close()
		if werr != nil || cerr != nil {
			return fmt.Errorf("%s: write secret to pipe: %w", bin, errors.Join(werr, cerr))
		}
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.ExtraFiles = files
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Info is what `qemu-img info` reads from an image's headers.
type Info struct {
	// Format is the image format (qcow2).
	Format string
	// Encrypted: the image is encrypted (qemu-img's "encrypted").
	Encrypted bool
	// EncryptFormat is "luks" for a LUKS-encrypted qcow2 (or a raw LUKS
	// file).
	EncryptFormat string
	// Cipher, Mode, Hash, IVGen and IVGenHash are the LUKS header's
	// algorithms (cipher-alg aes-256, cipher-mode xts, hash-alg sha256,
	// ivgen-alg plain64, ivgen-hash-alg when essiv).
	Cipher, Mode, Hash, IVGen, IVGenHash string
	// KeyBits is the master key's size in bits, as LUKS counts it (the
	// cipher's key length, twice for XTS: aes-256 xts is 512).
	KeyBits int
	// ActiveSlots counts the keyslots in use.
	ActiveSlots int
	// BackingFile is the backing file, if any, and BackingFormat its
	// format as the image names it.
	BackingFile, BackingFormat string
}

// Options returns the encryption options of a block-device record.
func (i Info) Options() map[string]string {
	if !i.Encrypted {
		return nil
	}
	o := map[string]string{"cipher": i.Cipher, "mode": i.Mode, "hash": i.Hash, "ivgen": i.IVGen}
	if i.IVGenHash != "" {
		o["ivgen_hash"] = i.IVGenHash
	}
	if i.KeyBits > 0 {
		o["key_size"] = strconv.Itoa(i.KeyBits)
	}
	return o
}

// Inspect reads an image's headers with qemu-img info (it does not unlock
// the image: a header read is not a passphrase check, see Verify).
func (t *Tool) Inspect(ctx context.Context, path string) (Info, error) {
	out, err := exec.CommandContext(ctx, t.qemuImg, "info", "--output=json", "-U", path).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return Info{}, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	return ParseInfo(out)
}

// ParseInfo parses `qemu-img info --output=json`.
func ParseInfo(out []byte) (Info, error) {
	var raw struct {
		Format         string `json:"format"`
		Encrypted      bool   `json:"encrypted"`
		BackingFile    string `json:"backing-filename"`
		BackingFormat  string `json:"backing-filename-format"`
		FormatSpecific struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"format-specific"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return Info{}, fmt.Errorf("qemu-img info: %w", err)
	}
	if raw.Format == "" {
		return Info{}, fmt.Errorf("qemu-img info: no format in its output")
	}
	info := Info{Format: raw.Format, Encrypted: raw.Encrypted, BackingFile: raw.BackingFile, BackingFormat: raw.BackingFormat}
	type luksHeader struct {
		Format    string `json:"format"`
		Cipher    string `json:"cipher-alg"`
		Mode      string `json:"cipher-mode"`
		Hash      string `json:"hash-alg"`
		IVGen     string `json:"ivgen-alg"`
		IVGenHash string `json:"ivgen-hash-alg"`
		Slots     []struct {
			Active bool `json:"active"`
		} `json:"slots"`
	}
	var h luksHeader
	switch raw.FormatSpecific.Type {
	case "qcow2":
		var d struct {
			Encrypt *luksHeader `json:"encrypt"`
		}
		if len(raw.FormatSpecific.Data) > 0 {
			if err := json.Unmarshal(raw.FormatSpecific.Data, &d); err != nil {
				return Info{}, fmt.Errorf("qemu-img info: qcow2 data: %w", err)
			}
		}
		if d.Encrypt != nil {
			h = *d.Encrypt
		}
	case "luks":
		if err := json.Unmarshal(raw.FormatSpecific.Data, &h); err != nil {
			return Info{}, fmt.Errorf("qemu-img info: luks data: %w", err)
		}
		h.Format = FormatLUKS
	}
	info.EncryptFormat, info.Cipher, info.Mode, info.Hash, info.IVGen, info.IVGenHash = h.Format, h.Cipher, h.Mode, h.Hash, h.IVGen, h.IVGenHash
	for _, s := range h.Slots {
		if s.Active {
			info.ActiveSlots++
		}
	}
	info.KeyBits = keyBits(h.Cipher, h.Mode)
	return info, nil
}

var cipherBitsRE = regexp.MustCompile(`-(\d+)$`)

// keyBits is the LUKS master key size of a QEMU cipher-alg/cipher-mode
// pair ("aes-256" "xts" → 512).
func keyBits(cipher, mode string) int {
	m := cipherBitsRE.FindStringSubmatch(cipher)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	if mode == "xts" {
		n *= 2
	}
	return n
}

// openArgs are the --object and --image-opts arguments that open the
// LUKS qcow2 image at path with the secret on fd 3 and, when backing is
// set, its encrypted backing file with the secret on fd 4.
func openArgs(path string, backing []byte) []string {
	args := []string{"--object", "secret,id=sec0,file=/dev/fd/3"}
	opts := "driver=qcow2,file.filename=" + optEscape(path) + ",encrypt.key-secret=sec0"
	if backing != nil {
		args = append(args, "--object", "secret,id=sec1,file=/dev/fd/4")
		opts += ",backing.encrypt.key-secret=sec1"
	}
	return append(args, "--image-opts", opts)
}

// Verify proves that pass unlocks the LUKS qcow2 image at path by
// opening it with qemu-io and reading its first sector (qemu-img info
// does not unlock). backing is the passphrase of its encrypted backing
// file (nil: the backing file, if any, is plain), which the read goes
// through. A passphrase that does not unlock is ErrWrongPassphrase.
func (t *Tool) Verify(ctx context.Context, path string, pass, backing []byte) error {
	open := openArgs(path, backing)
	args := append(open, "-r", "-U", "-c", "read 0 512")
	err := runWithSecrets(ctx, t.qemuIO, args, secretsOf(pass, backing)...)
	if err != nil && strings.Contains(err.Error(), "Invalid password") {
		return fmt.Errorf("open %s: %w", path, ErrWrongPassphrase)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	return nil
}

// VerifyImage proves that pass unlocks the encrypted image at path of
// format (qemu-img info's: "qcow2" for a LUKS qcow2, "luks" for a raw
// LUKS file) by opening it with qemu-io and reading its first sector; an
// image import proves this before an image naming a secret is kept. A
// passphrase that does not unlock is ErrWrongPassphrase.
func (t *Tool) VerifyImage(ctx context.Context, path, format string, pass []byte) error {
	var opts string
	switch format {
	case "qcow2":
		return t.Verify(ctx, path, pass, nil)
	case FormatLUKS:
		opts = "driver=luks,file.filename=" + optEscape(path) + ",key-secret=sec0"
	default:
		return fmt.Errorf("open %s: format %q is not an encrypted image format (qcow2 with LUKS, or raw LUKS)", path, format)
	}
	args := []string{"--object", "secret,id=sec0,file=/dev/fd/3", "--image-opts", opts, "-r", "-U", "-c", "read 0 512"}
	err := runWithSecrets(ctx, t.qemuIO, args, pass)
	if err != nil && strings.Contains(err.Error(), "Invalid password") {
		return fmt.Errorf("open %s: %w", path, ErrWrongPassphrase)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	return nil
}

// optEscape escapes a value for QEMU's key=value option syntax (a comma
// is doubled).
func optEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// Resize changes the virtual size of the LUKS qcow2 image at path (the
// passphrase opens it: qemu-img resize needs the encryption layer).
// shrink allows a smaller size (an undo); otherwise a smaller size is
// refused by qemu-img. backing is the passphrase of an encrypted backing
// file (qemu-img resize opens the whole chain), nil for a plain one.
func (t *Tool) Resize(ctx context.Context, path string, size int64, shrink bool, pass, backing []byte) error {
	args := []string{"resize", "-q"}
	if shrink {
		args = append(args, "--shrink")
	}
	open := openArgs(path, backing)
	args = append(append(args, open...), strconv.FormatInt(size, 10))
	return runWithSecrets(ctx, t.qemuImg, args, secretsOf(pass, backing)...)
}

func secretsOf(pass, backing []byte) [][]byte {
	if backing == nil {
		return [][]byte{pass}
	}
	return [][]byte{pass, backing}
}
