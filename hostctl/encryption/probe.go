package encryption

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Encryption formats of the specification (Nova's
// BlockDeviceEncryptionFormatType), as the policy names them.
const (
	// FormatLUKSv2 is LUKS version 2.
	FormatLUKSv2 = "luksv2"
	// FormatPlain is dm-crypt PLAIN (Nova's legacy LVM backend).
	FormatPlain = "plain"
)

// Traits of the specification (os-traits).
const (
	TraitEphemeralEncryption = "COMPUTE_EPHEMERAL_ENCRYPTION"
	TraitLUKS                = "COMPUTE_EPHEMERAL_ENCRYPTION_LUKS"
	TraitLUKSv2              = "COMPUTE_EPHEMERAL_ENCRYPTION_LUKSV2"
	TraitPlain               = "COMPUTE_EPHEMERAL_ENCRYPTION_PLAIN"
)

// ProbeOptions name the binaries Probe asks.
type ProbeOptions struct {
	// QemuImg, QemuSystem and Cryptsetup; from PATH when empty
	// (qemu-system-x86_64 for QemuSystem).
	QemuImg, QemuSystem, Cryptsetup string
	// TempDir holds Probe's scratch files (removed before it returns);
	// os.TempDir() when empty.
	TempDir string
}

// Support is what Probe found: the formats this host can make disks in
// and open in a guest, with the reason for each one it cannot.
type Support struct {
	// Formats are the supported formats, sorted ("luks").
	Formats []string `json:"formats"`
	// Why says, for each format of the specification not supported, why.
	Why map[string]string `json:"why,omitempty"`
}

// Supported returns the formats (the policy's input).
func (s Support) Supported() []string { return slices.Clone(s.Formats) }

// Has reports whether format is supported.
func (s Support) Has(format string) bool { return slices.Contains(s.Formats, format) }

// Traits returns the COMPUTE_EPHEMERAL_ENCRYPTION traits of the supported
// formats: the general trait when any format is supported, and one per
// format.
func (s Support) Traits() []string {
	var out []string
	if len(s.Formats) > 0 {
		out = append(out, TraitEphemeralEncryption)
	}
	for _, f := range s.Formats {
		switch f {
		case FormatLUKS:
			out = append(out, TraitLUKS)
		case FormatLUKSv2:
			out = append(out, TraitLUKSv2)
		case FormatPlain:
			out = append(out, TraitPlain)
		}
	}
	slices.Sort(out)
	return out
}

// Probe asks this host's tools what they support, without assuming:
//
//   - luks: qemu-img lists the luks driver and qcow2's encrypt.format
//     option, and the QEMU emulator has the secret object libvirt hands
//     passphrases over with;
//   - luksv2: cryptsetup formats a scratch LUKS2 file, and qemu-img must
//     then open it (QEMU before 9 cannot: hostctl could make such a disk
//     but no guest could use it);
//   - plain: dm-crypt PLAIN needs device-mapper and a block-device image
//     backend (Nova's LVM); hostctl keeps disks as files, so it is never
//     offered — the reason says so.
func Probe(ctx context.Context, opts ProbeOptions) Support {
	if opts.QemuImg == "" {
		opts.QemuImg = "qemu-img"
	}
	if opts.QemuSystem == "" {
		opts.QemuSystem = "qemu-system-x86_64"
	}
	if opts.Cryptsetup == "" {
		opts.Cryptsetup = "cryptsetup"
	}
	s := Support{Why: map[string]string{}}
	if why := probeLUKS(ctx, opts); why != "" {
		s.Why[FormatLUKS] = why
	} else {
		s.Formats = append(s.Formats, FormatLUKS)
	}
	if why := probeLUKSv2(ctx, opts); why != "" {
		s.Why[FormatLUKSv2] = why
	} else {
		s.Formats = append(s.Formats, FormatLUKSv2)
	}
	s.Why[FormatPlain] = "dm-crypt PLAIN needs a block-device image backend (Nova's LVM); hostctl keeps disks as files"
	slices.Sort(s.Formats)
	return s
}

func probeLUKS(ctx context.Context, opts ProbeOptions) string {
	help, err := exec.CommandContext(ctx, opts.QemuImg, "--help").Output()
	if err != nil {
		return fmt.Sprintf("%s --help: %v", opts.QemuImg, err)
	}
	if !hasFormat(help, "luks") {
		return opts.QemuImg + " does not list the luks format driver"
	}
	// qcow2's creation options, listed through convert: the probe never
	// runs `qemu-img create` (a test's or an operator's qemu-img wrapper
	// may act on every create).
	create, err := exec.CommandContext(ctx, opts.QemuImg, "convert", "-O", "qcow2", "-o", "help").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s convert -O qcow2 -o help: %v", opts.QemuImg, err)
	}
	if !bytes.Contains(create, []byte("encrypt.format")) || !bytes.Contains(create, []byte("'luks'")) {
		return opts.QemuImg + ": qcow2 has no encrypt.format=luks option"
	}
	objs, err := exec.CommandContext(ctx, opts.QemuSystem, "-object", "help").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s -object help: %v", opts.QemuSystem, err)
	}
	if !hasLine(objs, "secret") {
		return opts.QemuSystem + " has no secret object (libvirt cannot pass it a passphrase)"
	}
	return ""
}

func hasFormat(help []byte, format string) bool {
	for _, line := range strings.Split(string(help), "\n") {
		if rest, ok := strings.CutPrefix(line, "Supported formats:"); ok {
			return slices.Contains(strings.Fields(rest), format)
		}
	}
	return false
}

func hasLine(out []byte, word string) bool {
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == word {
			return true
		}
	}
	return false
}

func probeLUKSv2(ctx context.Context, opts ProbeOptions) string {
	cs, err := exec.LookPath(opts.Cryptsetup)
	if err != nil {
		return "cryptsetup is not installed (it formats LUKS2; qemu-img writes LUKS1 only)"
	}
	dir, err := os.MkdirTemp(opts.TempDir, "vmeta-luks2-probe-")
	if err != nil {
		return fmt.Sprintf("scratch directory: %v", err)
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "probe.luks2")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		return err.Error()
	}
	if err := os.Truncate(f, 32<<20); err != nil {
		return err.Error()
	}
	// A throwaway passphrase for a scratch file; PBKDF2 with few
	// iterations keeps the probe quick.
	pass := []byte("vmeta-probe")
	cmd := exec.CommandContext(ctx, cs, "luksFormat", "-q", "--disable-locks", "--type", "luks2",
		"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", "-", f)
	cmd.Stdin = bytes.NewReader(pass)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("cryptsetup luksFormat --type luks2: %v: %s", err, strings.TrimSpace(string(out)))
	}
	err = runWithSecret(ctx, opts.QemuImg, []string{"info", "--object", "secret,id=sec0,file=/dev/fd/3",
		"--image-opts", "driver=luks,file.filename=" + optEscape(f) + ",key-secret=sec0"}, pass)
	if err != nil {
		msg := err.Error()
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[i+2:]
		}
		return "cryptsetup formats LUKS2, but QEMU cannot open it (" + msg + ")"
	}
	return ""
}

// Prober runs Probe once, in the background, and hands its result to
// whoever asks (the heartbeat's traits, the policy).
type Prober struct {
	once sync.Once
	done chan struct{}
	s    Support
	opts ProbeOptions
}

// NewProber starts probing at once.
func NewProber(opts ProbeOptions) *Prober {
	p := &Prober{done: make(chan struct{}), opts: opts}
	go p.run()
	return p
}

func (p *Prober) run() {
	p.once.Do(func() {
		p.s = Probe(context.Background(), p.opts)
		close(p.done)
	})
}

// Support waits for the probe (or ctx) and returns its result.
func (p *Prober) Support(ctx context.Context) (Support, error) {
	select {
	case <-p.done:
		return p.s, nil
	case <-ctx.Done():
		return Support{}, fmt.Errorf("encryption support probe: %w", ctx.Err())
	}
}

// Ready returns the result when the probe has finished.
func (p *Prober) Ready() (Support, bool) {
	select {
	case <-p.done:
		return p.s, true
	default:
		return Support{}, false
	}
}

// Creatable is the formats hostctl makes disks in (qemu-img writes LUKS1
// into qcow2; LUKS2 and PLAIN it does not make).
var Creatable = []string{FormatLUKS}

// Only returns s restricted to formats: a format the tools support but
// hostctl does not create is not offered, and the reason says so.
func (s Support) Only(formats ...string) Support {
	out := Support{Why: map[string]string{}}
	for k, v := range s.Why {
		out.Why[k] = v
	}
	for _, f := range s.Formats {
		if slices.Contains(formats, f) {
			out.Formats = append(out.Formats, f)
		} else {
			out.Why[f] = "this host's tools support it, but hostctl does not create " + f + " disks"
		}
	}
	return out
}
