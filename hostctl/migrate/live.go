package migrate

// Live migration (issue 24 item 2): `hostctl instance migrate NAME --to
// HOST --live` moves a running instance through libvirt's own migration,
// peer to peer, its disks copied by libvirt (NBD) into files the
// destination made beforehand with the source's format and size. The
// guest keeps running and keeps its MACs and addresses; its metadata
// document stays published in the store the whole time (every host's
// metadata service answers it by address), and the destination
// republishes it as its owner right after the switchover (its DHCP
// entries with it).
//
// Like a cold move, a live one is a store record whose every step is a
// compare-and-swap and can be done again (LiveSteps):
//
//	live-recorded          the move is recorded; the destination's preflight passed
//	live-bases-sent        the blank-disk templates the destination lacked are there
//	live-secrets-moved     each secret is rewrapped under the destination's key
//	live-prepared          the destination made the disk files, the config drive
//	                       and the libvirt secrets
//	live-switched          libvirt's migration is done: the domain runs on the
//	                       destination and is gone from the source
//	live-owner-switched    the destination owns the record and republished it
//	live-source-cleaned    the source's files, libvirt secrets, claims and DHCP
//	                       entries are gone
//	live-secrets-forgotten the source's wraps of the secrets are gone
//
// and then the record goes: a live move has no verify (the source's
// disks are stale once the guest ran on the destination).
//
// libvirt's own migration either completes or leaves the source running.
// A move stopped before live-switched (an error, or a crash of either
// hostctl, even while libvirt migrates) is resumed by the same command:
// it first looks where the domain runs — still on the source, it
// migrates again; on the destination only, libvirt completed and the move
// goes on from there; on neither, it stops and says so. Before
// live-switched `hostctl instance revert-migration` undoes it (the
// destination's files and secrets go; the guest never stopped on the
// source); from live-switched on only the same command completes it, and
// a live migration back is the way home.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/store"
)

// LiveSteps are the steps of a live move, in order (its crash points,
// "migrate/live-…").
var LiveSteps = []string{"live-recorded", "live-bases-sent", "live-secrets-moved", "live-prepared", "live-switched",
	"live-owner-switched", "live-source-cleaned", "live-secrets-forgotten"}

func init() { crashpoint.Declare(Procedure, LiveSteps...) }

// Live is what a live move records besides a cold one's fields.
type Live struct {
	// Disks are the instance's disks as the destination makes them.
	Disks []LiveDisk `json:"disks"`
	// Target is where libvirt migrates the domain (the destination's
	// answer to its preparation).
	Target LiveTarget `json:"target"`
	// Files are the other files of the instance's directory the
	// destination's QEMU opens (firmware entries: fw_cfg.*); they are
	// sent over the channel before the migration.
	Files []DiskFile `json:"files,omitempty"`
	// TLS: the migration stream is encrypted (VIR_MIGRATE_TLS).
	TLS bool `json:"tls,omitempty"`
	// Switch is how long libvirt's migration took (the guest ran on
	// the source all but its last moment).
	Switch time.Duration `json:"switch_ns,omitempty"`
}

// LiveDisk is a disk the destination makes empty before the migration:
// its file name in the instance's directory, format, virtual size, the
// file it is an overlay of (relative to the data directory) and the
// key-manager secret of an encrypted one.
type LiveDisk struct {
	Name          string `json:"name"`
	Format        string `json:"format"`
	VirtualSize   int64  `json:"virtual_size"`
	Backing       string `json:"backing,omitempty"`
	BackingFormat string `json:"backing_format,omitempty"`
	Secret        string `json:"secret,omitempty"`
}

// LiveTarget is the destination as libvirt's migration reaches it.
type LiveTarget struct {
	// URI is the destination libvirtd's URI as the source's reaches it.
	URI string `json:"uri"`
	// MigrateURI is where the destination's QEMU listens
	// (tcp://HOST); "" lets libvirt choose.
	MigrateURI string `json:"migrate_uri,omitempty"`
	// DataDir is the destination's data directory: the source's paths
	// under its own are moved under it in the destination's XML.
	DataDir string `json:"data_dir"`
}

// LiveSource is this host as the source of a live move (LiveHost).
type LiveSource interface {
	Source
	// CheckLive returns instance name and its disks if it may move live:
	// this host owns it, its domain runs, the parts do not refuse
	// part.MigrateLive.
	CheckLive(ctx context.Context, name string) (Instance, *Live, error)
	// DomainState is libvirt's state of the instance's domain here (""
	// when there is none).
	DomainState(ctx context.Context, rec Record) (string, error)
	// MigrateDomain runs libvirt's migration of the instance's domain to
	// rec.Live.Target; it returns once the domain runs there, or with
	// libvirt's error (the domain then runs here still).
	MigrateDomain(ctx context.Context, rec Record) error
}

// LiveDestination is a host as the destination of a live move.
type LiveDestination interface {
	Destination
	// PrepareLive makes what the migration needs here (the disk files,
	// the config drive, the libvirt secrets) and says where libvirt
	// reaches this host.
	PrepareLive(ctx context.Context, rec Record) (LiveTarget, error)
	// DomainState is libvirt's state of the instance's domain here (""
	// when there is none).
	DomainState(ctx context.Context, rec Record) (string, error)
	// FinishLive takes the instance's record over (one compare-and-swap
	// from rec.Source) and republishes it from here: its DHCP entries,
	// a new device claimed, the config drive, the metadata revision.
	FinishLive(ctx context.Context, rec Record) error
}

// MigrateLive moves the running instance name to host dest live, or
// resumes its live move there; it returns once the instance runs on
// dest and the source's copy is gone. Bad requests are refused before
// anything moves, as for Migrate.
func (m *Migrator) MigrateLive(ctx context.Context, name, dest string) (Record, error) {
	if strings.TrimSpace(dest) == "" {
		return Record{}, fmt.Errorf("migrate %s live: %w: host: required (the destination host)", name, ErrInvalid)
	}
	ls, ok := m.Source.(LiveSource)
	if !ok {
		return Record{}, fmt.Errorf("migrate %s live: %w: this host cannot migrate live", name, ErrState)
	}
	uuid, err := m.Source.UUID(ctx, name)
	if err != nil {
		return Record{}, fmt.Errorf("migrate %s live: %w", name, err)
	}
	release, err := m.hold(name, uuid)
	if err != nil {
		return Record{}, fmt.Errorf("migrate %s live: %w", name, err)
	}
	defer release()
	rec, err := Load(ctx, m.Store, uuid)
	switch {
	case err == nil:
		if rec.Live == nil {
			return rec, fmt.Errorf("migrate %s live: %w: a cold move of it is %s: %s", name, ErrState, rec.State, nextMove(rec))
		}
		return m.resumeLive(ctx, ls, rec, dest)
	case !errors.Is(err, ErrNoMove):
		return Record{}, fmt.Errorf("migrate %s live: %w", name, err)
	}
	if dest == m.Host {
		return Record{}, fmt.Errorf("migrate %s live: %w: host %q: is this host (the instance lives here)", name, ErrInvalid, dest)
	}
	peer, err := m.liveDestination(ctx, dest)
	if err != nil {
		return Record{}, fmt.Errorf("migrate %s live: %w", name, err)
	}
	in, live, err := ls.CheckLive(ctx, name)
	if err != nil {
		return Record{}, fmt.Errorf("migrate %s live: %w", name, err)
	}
	now := time.Now().UTC()
	rec = Record{Instance: name, UUID: in.UUID, Source: m.Host, Dest: dest, State: Migrating, WasRunning: true, Started: now, Updated: now, Live: live,
		SourceSpec: in.Spec}
	if rec.Secrets, err = m.Source.Secrets(ctx, in.UUID); err != nil {
		return Record{}, fmt.Errorf("migrate %s live: %w", name, err)
	}
	if rec.Disks, err = m.Source.Disks(ctx, rec); err != nil {
		return Record{}, fmt.Errorf("migrate %s live: %w", name, err)
	}
	rec.Disks = append(rec.Disks, live.Files...)
	if rec, err = put(ctx, m.Store, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return Record{}, fmt.Errorf("migrate %s live: %w: another move of it has begun", name, ErrState)
		}
		return Record{}, fmt.Errorf("migrate %s live: %w", name, err)
	}
	need, err := peer.Preflight(ctx, rec)
	if err != nil {
		if derr := m.Store.DeleteRecord(context.WithoutCancel(ctx), Key(rec.UUID), rec.Version); derr != nil {
			m.log().Warn("a refused move's record stays; revert-migration removes it", "name", name, "err", derr)
		}
		return Record{}, fmt.Errorf("migrate %s live to %s: refused by the destination: %w", name, dest, err)
	}
	rec.Disks = withBases(rec.Disks, need)
	m.log().Info("live migration begins", "name", name, "uuid", rec.UUID, "to", dest)
	m.emit(ctx, "instance.migrate.started", rec, map[string]string{"live": "true"})
	if err := m.step(ctx, &rec, "live-recorded"); err != nil {
		return rec, m.stopped(ctx, &rec, "migrate live", err)
	}
	return m.runLive(ctx, ls, rec, peer)
}

// liveDestination is host as the destination of a live move.
func (m *Migrator) liveDestination(ctx context.Context, host string) (LiveDestination, error) {
	d, err := m.Hosts.Destination(ctx, host)
	if err != nil {
		return nil, err
	}
	ld, ok := d.(LiveDestination)
	if !ok {
		return nil, fmt.Errorf("%w: host %s cannot receive a live migration", ErrUnavailable, host)
	}
	return ld, nil
}

// resumeLive continues rec, a stored live move, as a request to move it
// to dest.
func (m *Migrator) resumeLive(ctx context.Context, ls LiveSource, rec Record, dest string) (Record, error) {
	switch {
	case rec.Source != m.Host:
		return rec, fmt.Errorf("migrate %s live: %w: it is moving from %s to %s (%s): ask host %s", rec.Instance, ErrState, rec.Source, rec.Dest, rec.State, rec.Source)
	case rec.State != Migrating:
		return rec, fmt.Errorf("migrate %s live: %w: its move to %s is %s: %s", rec.Instance, ErrState, rec.Dest, rec.State, nextMove(rec))
	case dest != "" && dest != rec.Dest:
		return rec, fmt.Errorf("migrate %s live: %w: it is moving to %s already (%s)", rec.Instance, ErrState, rec.Dest, nextMove(rec))
	}
	peer, err := m.liveDestination(ctx, rec.Dest)
	if err != nil {
		return rec, m.stopped(ctx, &rec, "migrate live", err)
	}
	if rec.Step == "" {
		need, err := peer.Preflight(ctx, rec)
		if err != nil {
			return rec, m.stopped(ctx, &rec, "migrate live", fmt.Errorf("refused by the destination: %w", err))
		}
		rec.Disks = withBases(rec.Disks, need)
		if err := m.step(ctx, &rec, "live-recorded"); err != nil {
			return rec, m.stopped(ctx, &rec, "migrate live", err)
		}
	}
	m.log().Info("live migration resumes", "name", rec.Instance, "to", rec.Dest, "after", rec.Step)
	return m.runLive(ctx, ls, rec, peer)
}

// runLive does the steps of LiveSteps rec has not done yet, then removes
// the record.
func (m *Migrator) runLive(ctx context.Context, ls LiveSource, rec Record, peer LiveDestination) (Record, error) {
	do := []struct {
		step string
		fn   func() error
	}{
		{"live-bases-sent", func() error { return m.sendBases(ctx, &rec, peer) }},
		{"live-secrets-moved", func() error { return m.sendSecrets(ctx, rec, peer) }},
		{"live-prepared", func() error {
			t, err := peer.PrepareLive(ctx, rec)
			rec.Live.Target = t
			return err
		}},
		{"live-switched", func() error { return m.switchOver(ctx, ls, &rec, peer) }},
		{"live-owner-switched", func() error { return peer.FinishLive(ctx, rec) }},
		{"live-source-cleaned", func() error { return m.Source.Cleanup(ctx, rec) }},
		{"live-secrets-forgotten", func() error { return m.forgetSecrets(ctx, rec) }},
	}
	for _, d := range do {
		if rec.done(LiveSteps, d.step) {
			continue
		}
		if err := d.fn(); err != nil {
			return rec, m.stopped(ctx, &rec, "migrate live", fmt.Errorf("%s: %w", d.step, err))
		}
		if err := m.step(ctx, &rec, d.step); err != nil {
			return rec, m.stopped(ctx, &rec, "migrate live", err)
		}
	}
	if err := m.Store.DeleteRecord(ctx, Key(rec.UUID), rec.Version); err != nil {
		return rec, m.stopped(ctx, &rec, "migrate live", err)
	}
	m.log().Info("instance migrated live", "name", rec.Instance, "to", rec.Dest, "switch", rec.Live.Switch)
	m.emit(ctx, "instance.migrate.completed", rec, map[string]string{"live": "true",
		"switch_seconds": fmt.Sprintf("%.3f", rec.Live.Switch.Seconds())})
	if m.Observe != nil {
		m.Observe(rec, nil)
	}
	rec.State, rec.Version = "", 0
	return rec, nil
}

// sendBases sends the backing files the destination lacks and the
// instance's other files (Live.Files); a live move sends no disk file:
// libvirt copies the disks.
func (m *Migrator) sendBases(ctx context.Context, rec *Record, peer Destination) error {
	for i := range rec.Disks {
		f := &rec.Disks[i]
		if slices.ContainsFunc(rec.Live.Disks, func(d LiveDisk) bool { return d.Name == f.Name }) {
			continue
		}
		one := Record(*rec)
		one.Disks = []DiskFile{*f}
		if err := m.copyDisks(ctx, &one, peer); err != nil {
			return err
		}
		*f = one.Disks[0]
		rec.Bytes += one.Bytes
	}
	return nil
}

// switchOver looks where the domain runs and migrates it when it runs
// here: libvirt either completes (the domain runs on the destination) or
// leaves it running here.
func (m *Migrator) switchOver(ctx context.Context, ls LiveSource, rec *Record, peer LiveDestination) error {
	here, err := ls.DomainState(ctx, *rec)
	if err != nil {
		return err
	}
	there, err := peer.DomainState(ctx, *rec)
	if err != nil {
		return err
	}
	switch {
	case there == "running" && here != "running":
		m.log().Info("the domain runs on the destination already: libvirt's migration completed", "name", rec.Instance, "to", rec.Dest)
		return nil
	case here != "running" && here != "paused":
		return fmt.Errorf("%w: the domain runs on neither host (source %q, destination %q): start it where its disks are current, then `hostctl instance revert-migration %s`", ErrState, here, there, rec.Instance)
	}
	start := time.Now()
	if err := ls.MigrateDomain(ctx, *rec); err != nil {
		return fmt.Errorf("libvirt's migration (the domain runs on %s still): %w", rec.Source, err)
	}
	rec.Live.Switch = time.Since(start)
	if there, err = peer.DomainState(ctx, *rec); err != nil {
		return err
	}
	if there != "running" {
		return fmt.Errorf("%w: libvirt's migration returned but the domain on %s is %q", ErrState, rec.Dest, there)
	}
	return nil
}

// liveNext says what completes a live move that stopped.
func liveNext(rec Record) string {
	if liveRevertable(rec) != nil {
		return fmt.Sprintf("`hostctl instance migrate %s --to %s --live` completes it (the guest runs on %s)", rec.Instance, rec.Dest, rec.Dest)
	}
	return fmt.Sprintf("`hostctl instance migrate %s --to %s --live` resumes it, `hostctl instance revert-migration %s` undoes it (the guest runs on %s still)", rec.Instance, rec.Dest, rec.Instance, rec.Source)
}

// liveRevertable refuses the revert of a live move whose guest runs on
// the destination already.
func liveRevertable(rec Record) error {
	if rec.Live == nil || rec.State != Migrating || !rec.done(LiveSteps, "live-switched") {
		return nil
	}
	return fmt.Errorf("%w: the guest runs on %s already (step %s): `hostctl instance migrate %s --to %s --live` completes the move; a live migration back is the way home",
		ErrState, rec.Dest, rec.Step, rec.Instance, rec.Dest)
}
