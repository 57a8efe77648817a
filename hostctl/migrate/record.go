// Package migrate moves an instance from one host to another host of the
// same store (issue 24): cold migration with confirm and revert, its
// secrets following it (internal/keys, move.go), its disks copied over an
// authenticated host-to-host channel (channel.go).
//
// A move is a store record ("migration/<instance uuid>") that says where
// the instance goes and how far the move got; every step writes it with
// a version check (store.Update) and every step can be done again: it
// looks at what is there before it acts. A crash of either host at any
// step leaves the record in a named state — migrating (at a step, with
// the error that stopped it), verify, confirming or reverting — that
// `hostctl instance show` names, and that a retry (`instance migrate`
// again), a confirm or a revert completes (crash_test.go: every step,
// both sides).
//
// The source host drives the move (procedure.go): it stops the
// instance, sends its disk files as they are (a LUKS disk's ciphertext,
// never its plaintext) and its secrets' passphrases to the destination,
// which rewraps them under its own key; the destination takes the
// instance's record over (one compare-and-swap of its owner), defines
// its domain as an apply does for part.MigrateCold (libvirt secrets
// before the domain, a new config drive and firmware entries, its DHCP
// entries, a new one-time-use device claimed and burned) and starts it
// when it ran before. The move then waits in verify. Confirm removes
// what the source still holds (domain, libvirt secrets, files, its wrap
// of each secret; part.ConfirmMigration); revert removes what the
// destination made (part.RevertMigration), gives the secrets and the
// record back to the source and starts the instance there again.
package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

// The states of a move, as `hostctl instance show` names them.
const (
	// Migrating: the move is under way, or stopped at Step (Error says
	// why): `instance migrate` again resumes it, `instance
	// revert-migration` undoes it.
	Migrating = "migrating"
	// Verify: the instance runs (or is defined) on the destination; the
	// source keeps its disks until a confirm.
	Verify = "verify"
	// Confirming and Reverting: a confirm or a revert is under way (or
	// stopped at Step): the same command again completes it.
	Confirming = "confirming"
	Reverting  = "reverting"
)

// The steps of a move, a confirm and a revert, in order (the crash
// matrix of crash_test.go is taken from these lists).
var (
	MigrateSteps = []string{"recorded", "stopped", "disks-copied", "secrets-moved", "owner-switched", "started"}
	ConfirmSteps = []string{"confirming", "source-cleaned", "secrets-forgotten"}
	RevertSteps  = []string{"reverting", "destination-cleaned", "secrets-back", "owner-back", "restarted"}
)

// Sentinel errors, with the kinds the admin API maps to statuses.
var (
	// ErrNoMove: the instance is not being moved.
	ErrNoMove = errkind.New(errkind.NotFound, "no move of this instance")
	// ErrState: the move (or the instance) is not in a state that
	// allows the request.
	ErrState = errkind.New(errkind.Conflict, "move state does not allow this")
	// ErrInvalid: a request names no host, an unknown one, or this one.
	ErrInvalid = errkind.New(errkind.Invalid, "invalid move request")
	// ErrUnavailable: the other host cannot be reached, or is down.
	ErrUnavailable = errkind.New(errkind.Unavailable, "host unavailable")
	// ErrForbidden: a host-to-host request the store does not back.
	ErrForbidden = errkind.New(errkind.Forbidden, "host request refused")
)

// Record is a move as stored.
type Record struct {
	Instance string `json:"instance"`
	UUID     string `json:"uuid"`
	Source   string `json:"source"`
	Dest     string `json:"dest"`
	State    string `json:"state"`
	// Step is the last step done (MigrateSteps, ConfirmSteps,
	// RevertSteps).
	Step string `json:"step"`
	// Error is why the last attempt stopped ("" when it did not).
	Error string `json:"error,omitempty"`
	// WasRunning: the instance ran when the move began (it runs again
	// where it ends up).
	WasRunning bool `json:"was_running"`
	// SourceSpec is the instance's stored spec when the move began: a
	// revert gives the record back with it (the destination's apply
	// named its own passthrough devices).
	SourceSpec json.RawMessage `json:"source_spec,omitempty"`
	// Secrets are the key-manager secrets that move with the disks.
	Secrets []string `json:"secrets,omitempty"`
	// Disks are the files copied and their sizes.
	Disks []DiskFile `json:"disks,omitempty"`
	// Bytes is how many bytes of disk were sent.
	Bytes   int64     `json:"bytes"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	// Copy is how long the disk copy took.
	Copy time.Duration `json:"copy_ns,omitempty"`
	// StopTimeout is how long a running guest has to shut down before
	// its domain is powered off (0: the host's default).
	StopTimeout time.Duration `json:"stop_timeout_ns,omitempty"`
	// Live is a live move's own part (live.go); nil for a cold move.
	Live *Live `json:"live,omitempty"`
	// Version is the store record's version.
	Version int64 `json:"-"`
}

// DiskFile is a disk's file as it moves: its name in the instance's
// directory, its size and its SHA-256 (hex).
type DiskFile struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	// Backing is the file the disk is an overlay of, relative to the
	// data directory (an image of the catalog, a blank-disk template),
	// and BackingFormat its format; the destination points the disk at
	// its own copy. BackingPath is the source's file; Path and BackingPath are the source's paths (a resumed move reads them).
	Backing       string `json:"backing,omitempty"`
	BackingFormat string `json:"backing_format,omitempty"`
	BackingPath   string `json:"backing_path,omitempty"`
	// Secret is the key-manager secret that opens an encrypted disk
	// ("" for a plain one).
	Secret string `json:"secret,omitempty"`
}

// Key is the store key of the move of instance uuid.
func Key(uuid string) string { return "migration/" + uuid }

// keyPrefix lists the moves.
const keyPrefix = "migration/"

// done reports whether step comes at or before rec.Step in steps.
func (rec Record) done(steps []string, step string) bool {
	at, want := slices.Index(steps, rec.Step), slices.Index(steps, step)
	return at >= 0 && want >= 0 && want <= at
}

// Records is what the moves need of the store.
type Records interface {
	store.ReadWriter
	DeleteRecord(ctx context.Context, key string, expectVersion int64) error
	Records(ctx context.Context, prefix string) ([]store.Record, error)
}

// Load returns the move of instance uuid (ErrNoMove when none).
func Load(ctx context.Context, st Records, uuid string) (Record, error) {
	r, err := st.Record(ctx, Key(uuid))
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, fmt.Errorf("%w (instance %s)", ErrNoMove, uuid)
	}
	if err != nil {
		return Record{}, fmt.Errorf("read move of %s: %w", uuid, err)
	}
	return decode(r)
}

func decode(r store.Record) (Record, error) {
	var rec Record
	if err := json.Unmarshal(r.Value, &rec); err != nil {
		return Record{}, fmt.Errorf("move record %s: %w", r.Key, err)
	}
	rec.Version = r.Version
	return rec, nil
}

// List returns every move in the store.
func List(ctx context.Context, st Records) ([]Record, error) {
	rs, err := st.Records(ctx, keyPrefix)
	if err != nil {
		return nil, fmt.Errorf("list moves: %w", err)
	}
	out := make([]Record, 0, len(rs))
	for _, r := range rs {
		rec, err := decode(r)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

// put writes rec at its version (0: it must not exist) and returns it
// with the new version; store.ErrConflict when another writer changed
// it.
func put(ctx context.Context, st Records, rec Record) (Record, error) {
	val, err := json.Marshal(rec)
	if err != nil {
		return Record{}, err
	}
	r, err := st.PutRecord(ctx, Key(rec.UUID), val, rec.Version)
	if err != nil {
		return Record{}, fmt.Errorf("write move of %s: %w", rec.Instance, err)
	}
	rec.Version = r.Version
	return rec, nil
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
