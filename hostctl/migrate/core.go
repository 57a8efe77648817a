package migrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// Core is what a host's side of a move needs of the controller core
// (hostctl/controller implements it).
type Core interface {
	Instance(ctx context.Context, name string) (store.Instance, error)
	OwnRecord(ctx context.Context, op, name string) (store.Instance, error)
	CheckRecordParts(ctx context.Context, op part.Op, rec store.Instance) error
	Capabilities() (hypervisor, records bool)
	PowerState(ctx context.Context, name, uuid string) string
	StopDomain(ctx context.Context, r *revert.Reverter, rec store.Instance, running bool, timeout time.Duration, again func(context.Context) error) error
	CurrentDomain(ctx context.Context, name, uuid string) (*controller.Domain, error)
	RemoveDomain(ctx context.Context, r *revert.Reverter, in *model.Instance) error
	TakeOver(ctx context.Context, rec store.Instance) (store.Instance, error)
	ApplyFor(ctx context.Context, op part.Op, in, old *model.Instance, expect int64) (*controller.Instance, error)
	Resume(ctx context.Context, rec store.Instance) error
	InstanceDir(name string) string
	DataDir() string
	Parts() []part.Part
	LockInstance(name string) (unlock func())
}

// DiskRecords is the disks part's side of a move (hostctl/parts/disks).
type DiskRecords interface {
	BlockDevices(ctx context.Context, uuid string) (encryption.BlockDevices, error)
	// UpdateBlockDevices rewrites records (as this host's: the disk
	// passphrase rotation of the host that owns the instance covers them).
	UpdateBlockDevices(ctx context.Context, r *revert.Reverter, in *model.Instance, upd map[string]*encryption.BlockDevice) error
	UndefineSecrets(ctx context.Context, instUUID string) error
}

// Keys is the key manager's side of a move (internal/keys, move.go).
type Keys interface {
	Passphrase(ctx context.Context, id string) ([]byte, error)
	PassphraseForMove(ctx context.Context, id string) ([]byte, error)
	MoveIn(ctx context.Context, id string, pass []byte) error
	MoveBack(ctx context.Context, id string) error
	ForgetMoved(ctx context.Context, id string) error
}

// Images reads a disk's backing file and points it at another
// (hostctl/encryption's Tool).
type Images interface {
	Inspect(ctx context.Context, path string) (encryption.Info, error)
	Rebase(ctx context.Context, path, backing, format string, pass []byte) error
}

// Host is one host's side of the moves, as source and as destination,
// over its controller core, disks part, key manager and qemu-img.
type Host struct {
	Name    string
	Core    Core
	Records DiskRecords
	Keys    Keys // nil: the host has no key manager (no encrypted disk moves)
	Images  Images
	Log     *slog.Logger
	// StopTimeout is how long a guest has to shut down before its domain
	// is powered off.
	StopTimeout time.Duration
}

func (h *Host) log() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}

// stagingDir is where the destination keeps the files of a move until it
// starts the instance.
func (h *Host) stagingDir(uuid string) string {
	return filepath.Join(h.Core.DataDir(), "migrations", uuid)
}

func decodeSpec(rec store.Instance) (*model.Instance, error) {
	var in model.Instance
	if err := json.Unmarshal(rec.Spec, &in); err != nil {
		return nil, fmt.Errorf("instance %s: decode stored spec: %w", rec.Name, err)
	}
	return &in, nil
}

// UUID implements Source.
func (h *Host) UUID(ctx context.Context, name string) (string, error) {
	rec, err := h.Core.Instance(ctx, name)
	if err != nil {
		return "", err
	}
	return rec.UUID, nil
}

// Check implements Source.
func (h *Host) Check(ctx context.Context, name string) (Instance, error) {
	if hv, _ := h.Core.Capabilities(); !hv {
		return Instance{}, fmt.Errorf("%w: this host runs without a hypervisor (--virt none): it has no disks or domain to move", ErrState)
	}
	rec, err := h.Core.OwnRecord(ctx, "migrate", name)
	if err != nil {
		return Instance{}, err
	}
	if err := h.Core.CheckRecordParts(ctx, part.MigrateCold, rec); err != nil {
		return Instance{}, err
	}
	st := h.Core.PowerState(ctx, name, rec.UUID)
	switch st {
	case "running", "shutoff", "shutdown", "crashed", "paused":
	default:
		return Instance{}, fmt.Errorf("%w: the instance's domain is %q: only a defined domain moves", ErrState, st)
	}
	return Instance{Name: name, UUID: rec.UUID, Running: st == "running" || st == "paused", Spec: rec.Spec}, nil
}

// Stop implements Source.
func (h *Host) Stop(ctx context.Context, rec Record) error {
	defer h.Core.LockInstance(rec.Instance)()
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return err
	}
	running := h.Core.PowerState(ctx, rec.Instance, rec.UUID) == "running"
	r := revert.New(h.log(), "stop "+rec.Instance+" for its move")
	timeout := h.StopTimeout
	if rec.StopTimeout > 0 {
		timeout = rec.StopTimeout
	}
	err = h.Core.StopDomain(ctx, r, srec, running, timeout, func(context.Context) error { return nil })
	r.Success()
	return err
}

// Disks implements Source.
func (h *Host) Disks(ctx context.Context, rec Record) ([]DiskFile, error) {
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return nil, err
	}
	in, err := decodeSpec(srec)
	if err != nil {
		return nil, err
	}
	bds, err := h.Records.BlockDevices(ctx, in.UUID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	data := h.Core.DataDir()
	var out []DiskFile
	for _, d := range in.Disks {
		name := layout.DiskFile(d)
		p := filepath.Join(h.Core.InstanceDir(in.Name), name)
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("disk %s: %w", d.Name, err)
		}
		f := DiskFile{Name: name, Path: p, Size: fi.Size(), Secret: bds.Disks[d.Name].EncryptionSecretUUID}
		info, err := h.Images.Inspect(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("disk %s: %w", d.Name, err)
		}
		if b := info.BackingFile; b != "" {
			if !filepath.IsAbs(b) {
				b = filepath.Join(filepath.Dir(p), b)
			}
			rel, err := filepath.Rel(data, b)
			if err != nil || !filepath.IsLocal(rel) {
				return nil, fmt.Errorf("disk %s: its backing file %s is outside the data directory %s: it cannot move", d.Name, b, data)
			}
			f.Backing, f.BackingFormat, f.BackingPath = filepath.ToSlash(rel), info.BackingFormat, b
		}
		out = append(out, f)
	}
	return out, nil
}

// Secrets implements Source.
func (h *Host) Secrets(ctx context.Context, uuid string) ([]string, error) {
	bds, err := h.Records.BlockDevices(ctx, uuid)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ids := bds.SecretUUIDs()
	if len(ids) > 0 && h.Keys == nil {
		return nil, fmt.Errorf("%w: the instance has encrypted disks and this host no key manager", ErrState)
	}
	return ids, nil
}

// Passphrase implements Source.
func (h *Host) Passphrase(ctx context.Context, id string) ([]byte, error) {
	return h.Keys.PassphraseForMove(ctx, id)
}

// ForgetSecret implements Source.
func (h *Host) ForgetSecret(ctx context.Context, id string) error { return h.Keys.ForgetMoved(ctx, id) }

// SecretBack implements Source.
func (h *Host) SecretBack(ctx context.Context, id string) error { return h.Keys.MoveBack(ctx, id) }

// Cleanup implements Source (a confirm) and Destination (a revert): what
// this host holds of the instance goes — its domain, libvirt secrets,
// files and received files; the parts are told (Moved). On the source it
// refuses to run while the source still owns the instance.
func (h *Host) Cleanup(ctx context.Context, rec Record) error {
	defer h.Core.LockInstance(rec.Instance)()
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return err
	}
	op := part.RevertMigration
	if rec.Source == h.Name {
		op = part.ConfirmMigration
		if srec.Host == h.Name {
			return fmt.Errorf("%w: %s still lives here: the source's copy is removed only once the destination owns it", ErrState, rec.Instance)
		}
	}
	in, err := decodeSpec(srec)
	if err != nil {
		return err
	}
	r := revert.New(h.log(), "remove what "+string(op)+" leaves of "+rec.Instance)
	err = h.Core.RemoveDomain(ctx, r, in)
	r.Success()
	if err != nil {
		return err
	}
	if err := h.Records.UndefineSecrets(ctx, in.UUID); err != nil {
		return err
	}
	pi := &part.Instance{Spec: in, Host: h.Name}
	if err := part.Run(part.Set(h.Core.Parts()), op, func(m part.Mover) error { return m.Moved(ctx, op, pi) }); err != nil {
		return err
	}
	for _, dir := range []string{h.Core.InstanceDir(in.Name), h.stagingDir(in.UUID)} {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if op == part.RevertMigration {
		crashpoint.Hit(crashpoint.Name(Procedure, "dest-cleaned"))
	}
	h.log().Info("moved instance's copy removed", "name", in.Name, "op", op)
	return nil
}

// TakeBack implements Source.
func (h *Host) TakeBack(ctx context.Context, rec Record) error {
	defer h.Core.LockInstance(rec.Instance)()
	return h.takeOver(ctx, rec, rec.Dest, rec.SourceSpec)
}

// takeOver makes this host the owner of rec's instance, owned by from
// (with spec as its stored spec, when not nil):
// its record (one compare-and-swap), then its disks' block-device
// records (the disk passphrase rotation follows the owner). A retry
// after a crash between the two finds the record this host's and
// rewrites the block-device records.
func (h *Host) takeOver(ctx context.Context, rec Record, from string, spec []byte) error {
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return err
	}
	switch srec.Host {
	case h.Name:
	case from:
		if spec != nil {
			srec.Spec = spec
		}
		if srec, err = h.Core.TakeOver(ctx, srec); err != nil {
			return err
		}
	default:
		return errkind.Errorf(errkind.Conflict, "%s lives on %s, neither %s nor %s: the move does not own it", rec.Instance, srec.Host, from, h.Name)
	}
	in, err := decodeSpec(srec)
	if err != nil {
		return err
	}
	bds, err := h.Records.BlockDevices(ctx, in.UUID)
	if err != nil || bds.Host == h.Name || len(bds.Disks) == 0 {
		return err
	}
	upd := map[string]*encryption.BlockDevice{}
	for d, bd := range bds.Disks {
		upd[d] = &bd
	}
	return h.Records.UpdateBlockDevices(ctx, nil, in, upd)
}

// Restart implements Source.
func (h *Host) Restart(ctx context.Context, rec Record) error {
	if !rec.WasRunning {
		return nil
	}
	defer h.Core.LockInstance(rec.Instance)()
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return err
	}
	if h.Core.PowerState(ctx, rec.Instance, rec.UUID) == "running" {
		return nil
	}
	return h.Core.Resume(ctx, srec)
}

// Preflight implements Destination.
func (h *Host) Preflight(ctx context.Context, rec Record) ([]string, error) {
	if hv, _ := h.Core.Capabilities(); !hv {
		return nil, fmt.Errorf("%w: host %s runs without a hypervisor (--virt none)", ErrState, h.Name)
	}
	cur, err := h.Core.CurrentDomain(ctx, rec.Instance, "")
	if err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%w: host %s's libvirt has a domain named %s already", ErrState, h.Name, rec.Instance)
	}
	if len(rec.Secrets) > 0 && h.Keys == nil {
		return nil, fmt.Errorf("%w: the instance has encrypted disks and host %s no key manager", ErrState, h.Name)
	}
	var need, missing []string
	for _, f := range rec.Disks {
		if f.Backing == "" || slices.Contains(need, f.Backing) {
			continue
		}
		if _, err := os.Stat(filepath.Join(h.Core.DataDir(), filepath.FromSlash(f.Backing))); err == nil {
			continue
		}
		if strings.HasPrefix(f.Backing, "images/") {
			missing = append(missing, f.Backing)
			continue
		}
		need = append(need, f.Backing)
	}
	if len(missing) > 0 {
		return nil, errkind.Errorf(errkind.NotFound, "host %s lacks the image files the instance's disks are overlays of (%s): import the images there first", h.Name, strings.Join(missing, ", "))
	}
	return need, nil
}

// ReceiveDisk implements Destination: the file is written next to its
// place, checked (size, SHA-256), synced and renamed.
func (h *Host) ReceiveDisk(ctx context.Context, rec Record, f DiskFile, body io.Reader) error {
	var dst string
	if rel, ok := strings.CutPrefix(f.Name, BasePrefix); ok {
		rel = filepath.FromSlash(rel)
		if !filepath.IsLocal(rel) || !strings.HasPrefix(filepath.ToSlash(rel), "instances/_base/") {
			return fmt.Errorf("%w: file %q: a backing file a move sends is a blank-disk template (instances/_base/)", ErrInvalid, f.Name)
		}
		dst = filepath.Join(h.Core.DataDir(), rel)
		if _, err := os.Stat(dst); err == nil {
			_, err := io.Copy(io.Discard, body)
			return err // this host made its own meanwhile
		}
	} else {
		if filepath.Base(f.Name) != f.Name || !slices.ContainsFunc(rec.Disks, func(d DiskFile) bool { return d.Name == f.Name }) {
			return fmt.Errorf("%w: file %q: not a disk of the move", ErrInvalid, f.Name)
		}
		dst = filepath.Join(h.stagingDir(rec.UUID), f.Name)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".incoming-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	hash := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, hash), io.LimitReader(body, f.Size+1))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("receive %s: %w", f.Name, err)
	}
	if n != f.Size || hex.EncodeToString(hash.Sum(nil)) != f.SHA256 {
		return fmt.Errorf("%w: file %s: received %d bytes with another checksum than the %d bytes sent", ErrInvalid, f.Name, n, f.Size)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.Name(Procedure, "dest-disk-received"))
	return nil
}

// ReceiveSecret implements Destination.
func (h *Host) ReceiveSecret(ctx context.Context, rec Record, id string, pass []byte) error {
	if !slices.Contains(rec.Secrets, id) {
		return fmt.Errorf("%w: secret %s is not one of the move's", ErrForbidden, id)
	}
	if h.Keys == nil {
		return fmt.Errorf("%w: host %s has no key manager", ErrState, h.Name)
	}
	if err := h.Keys.MoveIn(ctx, id, pass); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.Name(Procedure, "dest-secret-received"))
	return nil
}

// TakeOver implements Destination.
func (h *Host) TakeOver(ctx context.Context, rec Record) error {
	defer h.Core.LockInstance(rec.Instance)()
	if err := h.takeOver(ctx, rec, rec.Source, nil); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.Name(Procedure, "dest-owner-switched"))
	return nil
}

// Start implements Destination: the received disks go in place (pointed
// at this host's backing files), the parts claim what the instance needs
// here (a one-time-use device burned), the domain is defined and
// published as an apply does for part.MigrateCold, and started when it
// ran on the source.
func (h *Host) Start(ctx context.Context, rec Record) (err error) {
	defer h.Core.LockInstance(rec.Instance)()
	srec, err := h.Core.Instance(ctx, rec.Instance)
	if err != nil {
		return err
	}
	if srec.Host != h.Name {
		return fmt.Errorf("%w: %s is %s's, not this host's: the record moves before the domain", ErrState, rec.Instance, srec.Host)
	}
	in, err := decodeSpec(srec)
	if err != nil {
		return err
	}
	cur, err := h.Core.CurrentDomain(ctx, in.Name, "")
	if err != nil {
		return err
	}
	if cur == nil || h.Core.PowerState(ctx, in.Name, in.UUID) != "running" {
		if err := h.install(ctx, rec, in); err != nil {
			return err
		}
		pi := &part.Instance{Spec: in, Host: h.Name}
		end, err := part.Set(h.Core.Parts()).Claim(ctx, part.MigrateCold, pi)
		if err != nil {
			return err
		}
		_, err = h.Core.ApplyFor(ctx, part.MigrateCold, in, nil, srec.Revision)
		end(ctx, err)
		if err != nil {
			return err
		}
		if rec.WasRunning {
			if srec, err = h.Core.Instance(ctx, rec.Instance); err != nil {
				return err
			}
			if err := h.Core.Resume(ctx, srec); err != nil {
				return err
			}
		}
	}
	_ = os.RemoveAll(h.stagingDir(rec.UUID))
	crashpoint.Hit(crashpoint.Name(Procedure, "dest-started"))
	h.log().Info("moved instance defined here", "name", in.Name, "from", rec.Source, "running", rec.WasRunning)
	return nil
}

// install moves the received disks into the instance's directory and
// points each at this host's backing file.
func (h *Host) install(ctx context.Context, rec Record, in *model.Instance) error {
	dir := h.Core.InstanceDir(in.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range rec.Disks {
		if strings.HasPrefix(f.Name, BasePrefix) {
			continue
		}
		staged, dst := filepath.Join(h.stagingDir(rec.UUID), f.Name), filepath.Join(dir, f.Name)
		switch err := os.Rename(staged, dst); {
		case err == nil:
		case errors.Is(err, fs.ErrNotExist):
			if _, serr := os.Stat(dst); serr != nil {
				return fmt.Errorf("%w: disk %s was not received", ErrState, f.Name)
			}
		default:
			return err
		}
		if f.Backing == "" {
			continue
		}
		want := filepath.Join(h.Core.DataDir(), filepath.FromSlash(f.Backing))
		info, err := h.Images.Inspect(ctx, dst)
		if err != nil {
			return err
		}
		if info.BackingFile == want {
			continue
		}
		var pass []byte
		if info.Encrypted && f.Secret != "" {
			if pass, err = h.Keys.Passphrase(ctx, f.Secret); err != nil {
				return fmt.Errorf("disk %s: %w", f.Name, err)
			}
		}
		err = h.Images.Rebase(ctx, dst, want, f.BackingFormat, pass)
		clear(pass)
		if err != nil {
			return err
		}
	}
	return nil
}

var (
	_ Source      = (*Host)(nil)
	_ Destination = (*Host)(nil)
	_ Hosts       = (*Channel)(nil)
)
