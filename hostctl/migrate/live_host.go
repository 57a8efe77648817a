package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// LiveVirt is the hypervisor as a live move uses it (*virt.Conn).
type LiveVirt interface {
	MigratableXML(ctx context.Context, name string) ([]byte, error)
	Migrate(ctx context.Context, name string, m virt.Migration) error
}

// LiveDisks is the disks part as a live move's destination uses it: the
// libvirt secrets of the instance's encrypted disks, defined before the
// migration (QEMU opens the disks as the migration begins).
type LiveDisks interface {
	DefineSecrets(ctx context.Context, r *revert.Reverter, in *model.Instance) error
}

// LUKSCreator makes an empty LUKS qcow2 disk (hostctl/encryption's Tool).
type LUKSCreator interface {
	Create(ctx context.Context, d encryption.Disk, pass []byte) error
}

// LiveHost is a host's side of the moves that can also migrate live, as
// source and as destination, over its libvirt connection.
type LiveHost struct {
	*Host
	Virt           LiveVirt
	LibvirtSecrets LiveDisks
	LUKS           LUKSCreator // nil: no encrypted disk is made here
	// Drive makes the instance's config drive from its published
	// metadata when it has none here (the controller's EnsureDrive).
	Drive func(ctx context.Context, rec store.Instance) error
	// URI is this host's libvirtd as another host's libvirtd reaches it
	// (hostctl serve --migration-libvirt-uri).
	URI string
	// MigrateURI is where this host's QEMU listens for an incoming
	// migration stream (tcp://HOST; "": libvirt chooses).
	MigrateURI string
	// TLS: libvirt's migration TLS is configured on the hosts (hostctl
	// serve --migration-tls): the stream is encrypted (VIR_MIGRATE_TLS),
	// and instances with encrypted disks may move live.
	TLS bool
	// QemuImg is the qemu-img binary ("qemu-img" when empty).
	QemuImg string
}

func (h *LiveHost) qemuImg() string {
	if h.QemuImg == "" {
		return "qemu-img"
	}
	return h.QemuImg
}

// CheckLive implements LiveSource.
func (h *LiveHost) CheckLive(ctx context.Context, name string) (Instance, *Live, error) {
	if hv, _ := h.Core.Capabilities(); !hv {
		return Instance{}, nil, fmt.Errorf("%w: this host runs without a hypervisor (--virt none): nothing runs to migrate", ErrState)
	}
	rec, err := h.Core.OwnRecord(ctx, "migrate", name)
	if err != nil {
		return Instance{}, nil, err
	}
	if err := h.Core.CheckRecordParts(ctx, part.MigrateLive, rec); err != nil {
		return Instance{}, nil, err
	}
	if st := h.Core.PowerState(ctx, name, rec.UUID); st != "running" {
		return Instance{}, nil, fmt.Errorf("%w: the instance's domain is %q: only a running instance migrates live; a stopped one moves cold (without --live)", ErrState, st)
	}
	files, err := h.Host.Disks(ctx, Record{Instance: name, UUID: rec.UUID})
	if err != nil {
		return Instance{}, nil, err
	}
	live := &Live{TLS: h.TLS}
	if live.Files, err = h.instanceFiles(name); err != nil {
		return Instance{}, nil, err
	}
	for _, f := range files {
		vs, format, err := h.virtualSize(ctx, f.Path)
		if err != nil {
			return Instance{}, nil, err
		}
		if f.Secret != "" && !h.TLS {
			return Instance{}, nil, fmt.Errorf("%w: disk %s is encrypted: a live migration copies its blocks as the guest sees them (plaintext) and the guest's memory over libvirt's migration stream, which is not encrypted without libvirt's migration TLS (configure it on both hosts and start hostctl serve with --migration-tls), or move the instance cold", ErrState, f.Name)
		}
		live.Disks = append(live.Disks, LiveDisk{Name: f.Name, Format: format, VirtualSize: vs, Backing: f.Backing, BackingFormat: f.BackingFormat, Secret: f.Secret})
	}
	return Instance{Name: name, UUID: rec.UUID, Running: true, Spec: rec.Spec}, live, nil
}

// instanceFiles are the files of instance name's directory its running
// QEMU opened besides the disks and the config drive: its firmware
// entries (fw_cfg.*), which the destination's QEMU opens too.
func (h *LiveHost) instanceFiles(name string) ([]DiskFile, error) {
	dir := h.Core.InstanceDir(name)
	ms, err := filepath.Glob(filepath.Join(dir, "fw_cfg.*"))
	if err != nil {
		return nil, err
	}
	var out []DiskFile
	for _, p := range ms {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			out = append(out, DiskFile{Name: filepath.Base(p), Path: p})
		}
	}
	return out, nil
}

// virtualSize is the virtual size and format of the image at p (read
// with the running QEMU's lock shared).
func (h *LiveHost) virtualSize(ctx context.Context, p string) (int64, string, error) {
	out, err := exec.CommandContext(ctx, h.qemuImg(), "info", "-U", "--output=json", p).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return 0, "", fmt.Errorf("qemu-img info %s: %w", p, err)
	}
	var info struct {
		Format      string `json:"format"`
		VirtualSize int64  `json:"virtual-size"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return 0, "", fmt.Errorf("qemu-img info %s: %w", p, err)
	}
	return info.VirtualSize, info.Format, nil
}

// DomainState implements LiveSource and LiveDestination.
func (h *LiveHost) DomainState(ctx context.Context, rec Record) (string, error) {
	st := h.Core.PowerState(ctx, rec.Instance, rec.UUID)
	if st == "unknown" {
		return "", fmt.Errorf("%w: host %s's libvirtd does not say where %s runs", ErrUnavailable, h.Name, rec.Instance)
	}
	return st, nil
}

// MigrateDomain implements LiveSource: the destination's XML is the
// running domain's with this host's data directory replaced by the
// destination's; libvirt copies the disks' top layers (their backing
// files are on the destination: the preflight checked, the move sent the
// templates) into the files the destination made.
func (h *LiveHost) MigrateDomain(ctx context.Context, rec Record) error {
	t := rec.Live.Target
	if t.URI == "" || t.DataDir == "" {
		return fmt.Errorf("%w: the destination gave no libvirt URI or data directory", ErrState)
	}
	doc, err := h.Virt.MigratableXML(ctx, rec.Instance)
	if err != nil {
		return err
	}
	dest := virt.RewritePaths(doc, map[string]string{h.Core.DataDir(): t.DataDir})
	h.log().Info("libvirt migrates the domain", "name", rec.Instance, "to", rec.Dest, "uri", t.URI, "migrate_uri", t.MigrateURI, "tls", rec.Live.TLS)
	return h.Virt.Migrate(ctx, rec.Instance, virt.Migration{DestURI: t.URI, MigrateURI: t.MigrateURI, DestXML: dest,
		Storage: virt.StorageIncremental, TLS: rec.Live.TLS})
}

// PrepareLive implements LiveDestination: the disk files are made empty
// with the source's format and virtual size (overlays of this host's
// copy of their backing files; encrypted ones under the moved
// passphrase), the config drive is built from the published metadata,
// and the libvirt secrets are defined.
func (h *LiveHost) PrepareLive(ctx context.Context, rec Record) (LiveTarget, error) {
	defer h.Core.LockInstance(rec.Instance)()
	if hv, _ := h.Core.Capabilities(); !hv {
		return LiveTarget{}, fmt.Errorf("%w: host %s runs without a hypervisor (--virt none)", ErrState, h.Name)
	}
	if h.URI == "" {
		return LiveTarget{}, fmt.Errorf("%w: host %s has no libvirt URI for other hosts (hostctl serve --migration-libvirt-uri)", ErrState, h.Name)
	}
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return LiveTarget{}, err
	}
	if srec.Host != rec.Source && srec.Host != h.Name {
		return LiveTarget{}, errkind.Errorf(errkind.Conflict, "%s lives on %s, neither %s nor %s", rec.Instance, srec.Host, rec.Source, h.Name)
	}
	in, err := decodeSpec(srec)
	if err != nil {
		return LiveTarget{}, err
	}
	dir := h.Core.InstanceDir(in.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return LiveTarget{}, err
	}
	for _, d := range rec.Live.Disks {
		if err := h.makeDisk(ctx, dir, d); err != nil {
			return LiveTarget{}, fmt.Errorf("disk %s: %w", d.Name, err)
		}
	}
	for _, f := range rec.Live.Files { // received in the staging directory
		staged, dst := filepath.Join(h.stagingDir(rec.UUID), f.Name), filepath.Join(dir, f.Name)
		if err := os.Rename(staged, dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return LiveTarget{}, err
		}
		if _, err := os.Stat(dst); err != nil {
			return LiveTarget{}, fmt.Errorf("%w: file %s was not received", ErrState, f.Name)
		}
	}
	if h.Drive != nil {
		if err := h.Drive(ctx, srec); err != nil {
			return LiveTarget{}, err
		}
	}
	r := revert.New(h.log(), "define the libvirt secrets of "+in.Name+" for its live migration")
	err = h.LibvirtSecrets.DefineSecrets(ctx, r, in)
	r.Success()
	if err != nil {
		return LiveTarget{}, err
	}
	return LiveTarget{URI: h.URI, MigrateURI: h.MigrateURI, DataDir: h.Core.DataDir()}, nil
}

// makeDisk makes disk d in dir unless it is there: made under a
// temporary name and renamed, so that a crash leaves no half-made disk
// under its name.
func (h *LiveHost) makeDisk(ctx context.Context, dir string, d LiveDisk) error {
	if filepath.Base(d.Name) != d.Name || d.Name == "" || strings.HasPrefix(d.Name, ".") {
		return fmt.Errorf("%w: disk file %q", ErrInvalid, d.Name)
	}
	dst := filepath.Join(dir, d.Name)
	if _, err := os.Stat(dst); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	tmp := filepath.Join(dir, ".incoming-"+d.Name)
	_ = os.Remove(tmp)
	var base *encryption.Base
	if d.Backing != "" {
		rel := filepath.FromSlash(d.Backing)
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("%w: backing file %q is outside the data directory", ErrInvalid, d.Backing)
		}
		base = &encryption.Base{Path: filepath.Join(h.Core.DataDir(), rel), Format: d.BackingFormat}
	}
	size := strconv.FormatInt(d.VirtualSize, 10)
	if d.Secret != "" {
		if h.LUKS == nil || h.Keys == nil {
			return fmt.Errorf("%w: host %s cannot make encrypted disks", ErrState, h.Name)
		}
		pass, err := h.Keys.Passphrase(ctx, d.Secret)
		if err != nil {
			return err
		}
		err = h.LUKS.Create(ctx, encryption.Disk{Path: tmp, Size: size, Base: base}, pass)
		clear(pass)
		if err != nil {
			_ = os.Remove(tmp)
			return err
		}
	} else {
		args := []string{"create", "-q", "-f", d.Format}
		if base != nil {
			args = append(args, "-b", base.Path, "-F", base.Format)
		}
		args = append(args, tmp, size)
		if out, err := exec.CommandContext(ctx, h.qemuImg(), args...).CombinedOutput(); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("qemu-img %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return os.Rename(tmp, dst)
}

// FinishLive implements LiveDestination: once the domain runs here, the
// record moves here (one compare-and-swap from the source) and this host
// republishes the instance for part.MigrateLive as an apply of the same
// spec does to a running domain (no redefinition): its DHCP entries on
// this host's network, a new device claimed, the config drive, a new
// metadata revision whose owner is this host.
func (h *LiveHost) FinishLive(ctx context.Context, rec Record) error {
	defer h.Core.LockInstance(rec.Instance)()
	if st := h.Core.PowerState(ctx, rec.Instance, rec.UUID); st != "running" {
		return fmt.Errorf("%w: the domain of %s is %q here, not running: the switchover is not done", ErrState, rec.Instance, st)
	}
	if err := h.takeOver(ctx, rec, rec.Source, nil); err != nil {
		return err
	}
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return err
	}
	in, err := decodeSpec(srec)
	if err != nil {
		return err
	}
	pi := &part.Instance{Spec: in, Host: h.Name}
	end, err := part.Set(h.Core.Parts()).Claim(ctx, part.MigrateLive, pi)
	if err != nil {
		return err
	}
	_, err = h.Core.ApplyFor(ctx, part.MigrateLive, in, in.Clone(), srec.Revision)
	end(ctx, err)
	if err != nil {
		return err
	}
	h.log().Info("live-migrated instance republished here", "name", in.Name, "from", rec.Source)
	return nil
}

var (
	_ LiveSource      = (*LiveHost)(nil)
	_ LiveDestination = (*LiveHost)(nil)
)
