package migrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/store"
)

// Procedure names the crash points of this package (internal/crashpoint):
// "migrate/<step>" on the source, "migrate/dest-<step>" on the
// destination.
const Procedure = "migrate"

func init() {
	crashpoint.Declare(Procedure, MigrateSteps...)
	crashpoint.Declare(Procedure, ConfirmSteps...)
	crashpoint.Declare(Procedure, RevertSteps...)
	crashpoint.Declare(Procedure, DestSteps...)
}

// DestSteps are the destination's steps (its crash points).
var DestSteps = []string{"dest-disk-received", "dest-secret-received", "dest-owner-switched", "dest-started", "dest-cleaned"}

// Instance is an instance as a move starts: its name, UUID and whether
// its domain runs.
type Instance struct {
	Name, UUID string
	Running    bool
	// Spec is its stored spec (canonical JSON).
	Spec []byte
}

// Source is this host as the source of a move: what the procedure does
// to the instance here (core.go implements it over the controller).
type Source interface {
	// UUID is the UUID of instance name, whichever host owns it.
	UUID(ctx context.Context, name string) (string, error)
	// Check returns instance name if this host may move it: it owns it,
	// has a hypervisor, and the parts do not refuse part.MigrateCold.
	Check(ctx context.Context, name string) (Instance, error)
	// Stop leaves the instance's domain shut off and its libvirt
	// secrets undefined (a stopped one as it is).
	Stop(ctx context.Context, rec Record) error
	// Disks are the files of the instance's disks, with the files they
	// are overlays of (DiskFile.Backing).
	Disks(ctx context.Context, rec Record) ([]DiskFile, error)
	// Secrets are the key-manager secrets of the instance's disks.
	Secrets(ctx context.Context, uuid string) ([]string, error)
	// Passphrase is secret id's passphrase to send (the caller clears
	// it); once moved in at the destination, from the kept wrap.
	Passphrase(ctx context.Context, id string) ([]byte, error)
	// Cleanup removes what the instance left here once the move is
	// confirmed: its domain, libvirt secrets and files; the parts told
	// (part.ConfirmMigration).
	Cleanup(ctx context.Context, rec Record) error
	// ForgetSecret drops this host's kept wrap of secret id (confirm);
	// SecretBack makes it the secret's value again (revert).
	ForgetSecret(ctx context.Context, id string) error
	SecretBack(ctx context.Context, id string) error
	// TakeBack makes this host the instance's owner again, with the spec
	// it had here (rec.SourceSpec) (revert).
	TakeBack(ctx context.Context, rec Record) error
	// Restart starts the instance here again when it ran (revert).
	Restart(ctx context.Context, rec Record) error
}

// Destination is a host as the destination of a move: the channel's
// client on the source (channel.go), the host's own side (core.go) on
// the destination, a fake in the tests. Every call may be repeated.
type Destination interface {
	// Preflight checks, before anything moves, that the destination can
	// take the instance; it returns the backing files it lacks and
	// should be sent (blank-disk templates), and refuses, naming it,
	// what cannot be sent (an image of its catalog).
	Preflight(ctx context.Context, rec Record) (need []string, err error)
	// ReceiveDisk takes file f of the instance (Name in its directory;
	// a backing file when f.Name starts with BasePrefix), checking its
	// size and SHA-256.
	ReceiveDisk(ctx context.Context, rec Record, f DiskFile, body io.Reader) error
	// ReceiveSecret takes secret id's passphrase and wraps it under the
	// destination's key.
	ReceiveSecret(ctx context.Context, rec Record, id string, pass []byte) error
	// TakeOver makes the destination the owner of the instance's record
	// (one compare-and-swap from rec.Source).
	TakeOver(ctx context.Context, rec Record) error
	// Start puts the received disks in place, defines the domain for
	// part.MigrateCold and starts it when rec.WasRunning.
	Start(ctx context.Context, rec Record) error
	// Cleanup removes what the destination made of the instance (revert):
	// domain, libvirt secrets, files, received disks; the parts told
	// (part.RevertMigration).
	Cleanup(ctx context.Context, rec Record) error
}

// BasePrefix starts the name of a backing file a move sends (its path
// relative to the data directory follows).
const BasePrefix = "base:"

// Hosts finds the destination of a move.
type Hosts interface {
	// Destination is host, reached over the host-to-host channel: an
	// ErrInvalid error for a host the store does not know, ErrUnavailable
	// for one that is down or cannot be reached.
	Destination(ctx context.Context, host string) (Destination, error)
}

// Migrator moves instances from this host (the source drives every
// move, its confirm and its revert).
type Migrator struct {
	Store  Records
	Host   string
	Source Source
	Hosts  Hosts
	Log    *slog.Logger
	// Emit sends an audit event (instance.migrate.*); nil: none.
	Emit func(ctx context.Context, typ string, payload map[string]string)
	// Observe records a move's outcome in the metrics (nil: none).
	Observe func(rec Record, err error)
	// hook runs after each step's record is written (tests: an error
	// stops the procedure there as a crash would).
	hook func(step string) error

	mu      sync.Mutex
	running map[string]bool
	// copied counts the bytes sent of each disk copy under way, by
	// instance UUID (Status shows them).
	copied sync.Map
}

func (m *Migrator) log() *slog.Logger {
	if m.Log == nil {
		return slog.Default()
	}
	return m.Log
}

// hold marks a move of uuid running in this process (a second request is
// refused while one runs); release ends it.
func (m *Migrator) hold(name, uuid string) (release func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running == nil {
		m.running = map[string]bool{}
	}
	if m.running[uuid] {
		return nil, fmt.Errorf("%w: a move, confirm or revert of %s is running", ErrState, name)
	}
	m.running[uuid] = true
	return func() {
		m.mu.Lock()
		delete(m.running, uuid)
		m.mu.Unlock()
	}, nil
}

// step records that rec reached step (a compare-and-swap on its
// version) and marks the crash point.
func (m *Migrator) step(ctx context.Context, rec *Record, step string) error {
	rec.Step, rec.Error, rec.Updated = step, "", time.Now().UTC()
	next, err := put(ctx, m.Store, *rec)
	if err != nil {
		return err
	}
	*rec = next
	crashpoint.Hit(crashpoint.Name(Procedure, step))
	if m.hook != nil {
		return m.hook(step)
	}
	return nil
}

// stopped records why rec stopped (best effort: the record keeps its
// step either way) and returns the error the request answers.
func (m *Migrator) stopped(ctx context.Context, rec *Record, what string, err error) error {
	rec.Error, rec.Updated = err.Error(), time.Now().UTC()
	if next, perr := put(context.WithoutCancel(ctx), m.Store, *rec); perr == nil {
		*rec = next
	}
	m.emit(ctx, "instance.migrate.failed", *rec, map[string]string{"error": err.Error()})
	if m.Observe != nil {
		m.Observe(*rec, err)
	}
	return fmt.Errorf("%s %s: %w; the move is %s (step %q): %s", what, rec.Instance, err, rec.State, rec.Step, nextMove(*rec))
}

// nextMove says what completes a move in rec's state.
func nextMove(rec Record) string {
	switch rec.State {
	case Migrating:
		if rec.Live != nil {
			return liveNext(rec) // live.go
		}
		return fmt.Sprintf("`hostctl instance migrate %s --to %s` resumes it, `hostctl instance revert-migration %s` undoes it", rec.Instance, rec.Dest, rec.Instance)
	case Verify:
		return fmt.Sprintf("`hostctl instance confirm-migration %s` or `hostctl instance revert-migration %s` ends it", rec.Instance, rec.Instance)
	case Confirming:
		return fmt.Sprintf("`hostctl instance confirm-migration %s` completes it", rec.Instance)
	case Reverting:
		return fmt.Sprintf("`hostctl instance revert-migration %s` completes it", rec.Instance)
	}
	return ""
}

func (m *Migrator) emit(ctx context.Context, typ string, rec Record, extra map[string]string) {
	if m.Emit == nil {
		return
	}
	p := map[string]string{"name": rec.Instance, "uuid": rec.UUID, "source": rec.Source, "dest": rec.Dest, "state": rec.State, "step": rec.Step}
	for k, v := range extra {
		p[k] = v
	}
	m.Emit(ctx, typ, p)
}

// Status is the move of instance name (ErrNoMove when none); while its
// disks are being copied by this process, Bytes is how many were sent so
// far.
func (m *Migrator) Status(ctx context.Context, name string) (Record, error) {
	uuid, err := m.Source.UUID(ctx, name)
	if err != nil {
		return Record{}, err
	}
	rec, err := Load(ctx, m.Store, uuid)
	if err == nil {
		if n, ok := m.copied.Load(uuid); ok {
			rec.Bytes = n.(*atomic.Int64).Load()
		}
	}
	return rec, err
}

// Migrate moves instance name to host dest, or resumes its move there
// that stopped on the way; it returns once the instance is in verify on
// dest. Bad requests (no host, an unknown or a down one, this host, an
// instance that cannot move, a destination that lacks what the instance
// needs) are refused before anything moves.
func (m *Migrator) Migrate(ctx context.Context, name, dest string) (Record, error) {
	return m.MigrateWith(ctx, name, dest, 0)
}

// MigrateWith is Migrate where a running guest has stopTimeout to shut
// down before its domain is powered off (0: the host's default; a
// resumed move keeps the timeout it began with).
func (m *Migrator) MigrateWith(ctx context.Context, name, dest string, stopTimeout time.Duration) (Record, error) {
	if strings.TrimSpace(dest) == "" {
		return Record{}, fmt.Errorf("migrate %s: %w: host: required (the destination host)", name, ErrInvalid)
	}
	uuid, err := m.Source.UUID(ctx, name)
	if err != nil {
		return Record{}, fmt.Errorf("migrate %s: %w", name, err)
	}
	release, err := m.hold(name, uuid)
	if err != nil {
		return Record{}, fmt.Errorf("migrate %s: %w", name, err)
	}
	defer release()
	rec, err := Load(ctx, m.Store, uuid)
	switch {
	case err == nil && rec.Live != nil:
		return rec, fmt.Errorf("migrate %s: %w: a live move of it is %s: `hostctl instance migrate %s --to %s --live` resumes it", name, ErrState, rec.State, name, rec.Dest)
	case err == nil:
		return m.resume(ctx, rec, dest)
	case !errors.Is(err, ErrNoMove):
		return Record{}, fmt.Errorf("migrate %s: %w", name, err)
	}
	if dest == m.Host {
		return Record{}, fmt.Errorf("migrate %s: %w: host %q: is this host (the instance lives here)", name, ErrInvalid, dest)
	}
	peer, err := m.Hosts.Destination(ctx, dest)
	if err != nil {
		return Record{}, fmt.Errorf("migrate %s: %w", name, err)
	}
	in, err := m.Source.Check(ctx, name)
	if err != nil {
		return Record{}, fmt.Errorf("migrate %s: %w", name, err)
	}
	now := time.Now().UTC()
	rec = Record{Instance: name, UUID: in.UUID, Source: m.Host, Dest: dest, State: Migrating, WasRunning: in.Running, Started: now, Updated: now, StopTimeout: stopTimeout,
		SourceSpec: in.Spec}
	if rec.Secrets, err = m.Source.Secrets(ctx, in.UUID); err != nil {
		return Record{}, fmt.Errorf("migrate %s: %w", name, err)
	}
	if rec.Disks, err = m.Source.Disks(ctx, rec); err != nil {
		return Record{}, fmt.Errorf("migrate %s: %w", name, err)
	}
	if rec, err = put(ctx, m.Store, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return Record{}, fmt.Errorf("migrate %s: %w: another move of it has begun", name, ErrState)
		}
		return Record{}, fmt.Errorf("migrate %s: %w", name, err)
	}
	need, err := peer.Preflight(ctx, rec)
	if err != nil {
		// Nothing moved: the move is forgotten.
		if derr := m.Store.DeleteRecord(context.WithoutCancel(ctx), Key(rec.UUID), rec.Version); derr != nil {
			m.log().Warn("a refused move's record stays; revert-migration removes it", "name", name, "err", derr)
		}
		return Record{}, fmt.Errorf("migrate %s to %s: refused by the destination: %w", name, dest, err)
	}
	rec.Disks = withBases(rec.Disks, need)
	m.log().Info("instance move begins", "name", name, "uuid", rec.UUID, "to", dest, "running", rec.WasRunning)
	m.emit(ctx, "instance.migrate.started", rec, nil)
	if err := m.step(ctx, &rec, "recorded"); err != nil {
		return rec, m.stopped(ctx, &rec, "migrate", err)
	}
	return m.run(ctx, rec, peer)
}

// withBases adds the backing files the destination needs to the files
// to send (once each).
func withBases(files []DiskFile, need []string) []DiskFile {
	for _, rel := range need {
		i := slices.IndexFunc(files, func(f DiskFile) bool { return f.Backing == rel })
		if i < 0 || slices.ContainsFunc(files, func(f DiskFile) bool { return f.Name == BasePrefix+rel }) {
			continue
		}
		files = append(files, DiskFile{Name: BasePrefix + rel, Path: files[i].BackingPath, Size: -1})
	}
	return files
}

// resume continues rec, a stored move, as a request to move it to dest.
func (m *Migrator) resume(ctx context.Context, rec Record, dest string) (Record, error) {
	switch {
	case rec.Source != m.Host:
		return rec, fmt.Errorf("migrate %s: %w: it is moving from %s to %s (%s): ask host %s", rec.Instance, ErrState, rec.Source, rec.Dest, rec.State, rec.Source)
	case rec.State != Migrating:
		return rec, fmt.Errorf("migrate %s: %w: its move to %s is in %s: %s", rec.Instance, ErrState, rec.Dest, rec.State, nextMove(rec))
	case dest != rec.Dest:
		return rec, fmt.Errorf("migrate %s: %w: it is moving to %s already (%s)", rec.Instance, ErrState, rec.Dest, nextMove(rec))
	}
	peer, err := m.Hosts.Destination(ctx, rec.Dest)
	if err != nil {
		return rec, m.stopped(ctx, &rec, "migrate", err)
	}
	if rec.Step == "" { // stopped before the destination answered its preflight
		need, err := peer.Preflight(ctx, rec)
		if err != nil {
			return rec, m.stopped(ctx, &rec, "migrate", fmt.Errorf("refused by the destination: %w", err))
		}
		rec.Disks = withBases(rec.Disks, need)
		if err := m.step(ctx, &rec, "recorded"); err != nil {
			return rec, m.stopped(ctx, &rec, "migrate", err)
		}
	}
	m.log().Info("instance move resumes", "name", rec.Instance, "to", rec.Dest, "after", rec.Step)
	return m.run(ctx, rec, peer)
}

// run does the steps of MigrateSteps that rec has not done yet.
func (m *Migrator) run(ctx context.Context, rec Record, peer Destination) (Record, error) {
	do := []struct {
		step string
		fn   func() error
	}{
		{"stopped", func() error { return m.Source.Stop(ctx, rec) }},
		{"disks-copied", func() error { return m.copyDisks(ctx, &rec, peer) }},
		{"secrets-moved", func() error { return m.sendSecrets(ctx, rec, peer) }},
		{"owner-switched", func() error { return peer.TakeOver(ctx, rec) }},
		{"started", func() error { return peer.Start(ctx, rec) }},
	}
	for _, d := range do {
		if rec.done(MigrateSteps, d.step) {
			continue
		}
		if err := d.fn(); err != nil {
			return rec, m.stopped(ctx, &rec, "migrate", fmt.Errorf("%s: %w", d.step, err))
		}
		if d.step == "started" {
			rec.State = Verify
		}
		if err := m.step(ctx, &rec, d.step); err != nil {
			return rec, m.stopped(ctx, &rec, "migrate", err)
		}
	}
	m.log().Info("instance moved; waiting for confirm or revert", "name", rec.Instance, "to", rec.Dest, "bytes", rec.Bytes, "copy", rec.Copy)
	m.emit(ctx, "instance.migrate.verify", rec, map[string]string{"bytes": fmt.Sprint(rec.Bytes), "copy_seconds": fmt.Sprintf("%.3f", rec.Copy.Seconds())})
	if m.Observe != nil {
		m.Observe(rec, nil)
	}
	return rec, nil
}

// copyDisks sends every file of rec.Disks, each checked by its SHA-256.
func (m *Migrator) copyDisks(ctx context.Context, rec *Record, peer Destination) error {
	start := time.Now()
	var sent int64
	progress := new(atomic.Int64)
	m.copied.Store(rec.UUID, progress)
	defer m.copied.Delete(rec.UUID)
	for i := range rec.Disks {
		f := &rec.Disks[i]
		sum, size, err := fileSum(f.Path)
		if err != nil {
			return err
		}
		f.SHA256, f.Size = sum, size
		fh, err := os.Open(f.Path)
		if err != nil {
			return fmt.Errorf("disk %s: %w", f.Name, err)
		}
		err = peer.ReceiveDisk(ctx, *rec, *f, &counted{r: fh, n: progress})
		fh.Close()
		if err != nil {
			return fmt.Errorf("send disk %s: %w", f.Name, err)
		}
		sent += size
	}
	rec.Bytes, rec.Copy = sent, time.Since(start)
	return nil
}

// counted counts what is read through it into n.
type counted struct {
	r io.Reader
	n *atomic.Int64
}

func (c *counted) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// fileSum is the SHA-256 and size of the file at p.
func fileSum(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// sendSecrets sends every secret's passphrase, cleared once sent.
func (m *Migrator) sendSecrets(ctx context.Context, rec Record, peer Destination) error {
	for _, id := range rec.Secrets {
		pass, err := m.Source.Passphrase(ctx, id)
		if err != nil {
			return fmt.Errorf("secret %s: %w", id, err)
		}
		err = peer.ReceiveSecret(ctx, rec, id, pass)
		clear(pass)
		if err != nil {
			return fmt.Errorf("send secret %s: %w", id, err)
		}
	}
	return nil
}

// Confirm ends the move of instance name, in verify: what the source
// holds of it goes. A confirm that stopped on the way is completed.
func (m *Migrator) Confirm(ctx context.Context, name string) (Record, error) {
	rec, release, err := m.held(ctx, "confirm-migration", name)
	if err != nil {
		return rec, err
	}
	defer release()
	switch rec.State {
	case Verify:
		rec.State = Confirming
		if err := m.step(ctx, &rec, "confirming"); err != nil {
			return rec, m.stopped(ctx, &rec, "confirm-migration", err)
		}
	case Confirming:
	default:
		return rec, fmt.Errorf("confirm-migration %s: %w: the move is %s, not in verify: %s", name, ErrState, rec.State, nextMove(rec))
	}
	do := []struct {
		step string
		fn   func() error
	}{
		{"source-cleaned", func() error { return m.Source.Cleanup(ctx, rec) }},
		{"secrets-forgotten", func() error { return m.forgetSecrets(ctx, rec) }},
	}
	for _, d := range do {
		if rec.done(ConfirmSteps, d.step) {
			continue
		}
		if err := d.fn(); err != nil {
			return rec, m.stopped(ctx, &rec, "confirm-migration", fmt.Errorf("%s: %w", d.step, err))
		}
		if err := m.step(ctx, &rec, d.step); err != nil {
			return rec, m.stopped(ctx, &rec, "confirm-migration", err)
		}
	}
	if err := m.Store.DeleteRecord(ctx, Key(rec.UUID), rec.Version); err != nil {
		return rec, m.stopped(ctx, &rec, "confirm-migration", err)
	}
	m.log().Info("instance move confirmed", "name", name, "host", rec.Dest)
	m.emit(ctx, "instance.migrate.confirmed", rec, nil)
	rec.State, rec.Version = "", 0
	return rec, nil
}

// Revert ends the move of instance name the other way: what the
// destination made goes, the secrets and the record come back, and the
// instance starts here again when it ran. A move that stopped on the
// way (migrating) is reverted too; a revert that stopped is completed.
func (m *Migrator) Revert(ctx context.Context, name string) (Record, error) {
	rec, release, err := m.held(ctx, "revert-migration", name)
	if err != nil {
		return rec, err
	}
	defer release()
	if err := liveRevertable(rec); err != nil {
		return rec, fmt.Errorf("revert-migration %s: %w", name, err)
	}
	switch rec.State {
	case Verify, Migrating:
		rec.State = Reverting
		if err := m.step(ctx, &rec, "reverting"); err != nil {
			return rec, m.stopped(ctx, &rec, "revert-migration", err)
		}
	case Reverting:
	default:
		return rec, fmt.Errorf("revert-migration %s: %w: the move is %s: %s", name, ErrState, rec.State, nextMove(rec))
	}
	do := []struct {
		step string
		fn   func() error
	}{
		{"destination-cleaned", func() error {
			peer, err := m.Hosts.Destination(ctx, rec.Dest)
			if err != nil {
				return err
			}
			return peer.Cleanup(ctx, rec)
		}},
		{"secrets-back", func() error {
			for _, id := range rec.Secrets {
				if err := m.Source.SecretBack(ctx, id); err != nil {
					return err
				}
			}
			return nil
		}},
		{"owner-back", func() error { return m.Source.TakeBack(ctx, rec) }},
		{"restarted", func() error { return m.Source.Restart(ctx, rec) }},
	}
	for _, d := range do {
		if rec.done(RevertSteps, d.step) {
			continue
		}
		if err := d.fn(); err != nil {
			return rec, m.stopped(ctx, &rec, "revert-migration", fmt.Errorf("%s: %w", d.step, err))
		}
		if err := m.step(ctx, &rec, d.step); err != nil {
			return rec, m.stopped(ctx, &rec, "revert-migration", err)
		}
	}
	if err := m.Store.DeleteRecord(ctx, Key(rec.UUID), rec.Version); err != nil {
		return rec, m.stopped(ctx, &rec, "revert-migration", err)
	}
	m.log().Info("instance move reverted", "name", name, "host", rec.Source)
	m.emit(ctx, "instance.migrate.reverted", rec, nil)
	rec.State, rec.Version = "", 0
	return rec, nil
}

// held is the move of instance name, held in this process, for a confirm
// or a revert, which only its source host runs.
func (m *Migrator) held(ctx context.Context, what, name string) (Record, func(), error) {
	uuid, err := m.Source.UUID(ctx, name)
	if err != nil {
		return Record{}, nil, fmt.Errorf("%s %s: %w", what, name, err)
	}
	release, err := m.hold(name, uuid)
	if err != nil {
		return Record{}, nil, fmt.Errorf("%s %s: %w", what, name, err)
	}
	rec, err := Load(ctx, m.Store, uuid)
	if err != nil {
		release()
		return Record{}, nil, fmt.Errorf("%s %s: %w", what, name, err)
	}
	if rec.Source != m.Host {
		release()
		return rec, nil, fmt.Errorf("%s %s: %w: the move is driven by its source host %s: ask it", what, name, ErrState, rec.Source)
	}
	return rec, release, nil
}

// forgetSecrets has the source forget the secrets the move carried to
// the destination (the last step of a confirmed or live move).
func (m *Migrator) forgetSecrets(ctx context.Context, rec Record) error {
	for _, id := range rec.Secrets {
		if err := m.Source.ForgetSecret(ctx, id); err != nil {
			return err
		}
	}
	return nil
}
