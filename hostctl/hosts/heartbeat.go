package hosts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/vmeta/vmeta/internal/store"
)

// RecordPrefix is where heartbeat records live in the store.
const RecordPrefix = "host/"

// Defaults of the heartbeat.
const (
	// DefaultInterval is how often a host writes its heartbeat.
	DefaultInterval = 10 * time.Second
	// DefaultDownAfter is the silence after which a host counts as down:
	// several missed beats, so one slow store write does not mark it.
	DefaultDownAfter = 60 * time.Second
)

// Heartbeat is the record a host keeps in the store.
type Heartbeat struct {
	Host      string    `json:"host"`
	Version   string    `json:"version"`
	Started   time.Time `json:"started"`
	LastSeen  time.Time `json:"last_seen"`
	Instances int       `json:"instances"`
	// Stopped is set when the host shut down cleanly: it is down, but
	// said so, rather than went silent.
	Stopped bool `json:"stopped,omitempty"`
	// Traits are the host's capability traits (COMPUTE_EPHEMERAL_ENCRYPTION
	// and its formats), from what its tools were probed to support.
	Traits []string `json:"traits,omitempty"`
	// Holder is the process that holds the host name (lease.go); absent
	// in records written before leases.
	Holder *Holder `json:"holder,omitempty"`
}

// Status is a heartbeat as a reader sees it at a given time.
type Status struct {
	Heartbeat
	// Age is the time since LastSeen, by the reader's clock.
	Age time.Duration `json:"age"`
	// Down: silent for longer than DownAfter, or stopped.
	Down bool `json:"down"`
}

// Records is what the heartbeat needs from the store.
type Records interface {
	Record(ctx context.Context, key string) (store.Record, error)
	PutRecord(ctx context.Context, key string, value []byte, expectVersion int64) (store.Record, error)
	Records(ctx context.Context, prefix string) ([]store.Record, error)
}

// Key is the store key of host's heartbeat.
func Key(host string) string { return RecordPrefix + host }

// Beater keeps one host's heartbeat record fresh.
type Beater struct {
	Store   Records
	Host    string
	Version string
	// Interval between beats (DefaultInterval when 0).
	Interval time.Duration
	// Count returns the number of instances the host owns (optional).
	Count func(ctx context.Context) (int, error)
	// Traits returns the host's traits (optional; nil until known).
	Traits func() []string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	Log *slog.Logger
	// Holder, when set, is this process: every beat first checks that the
	// record is not held by another live process (ErrHostHeld), and
	// writes Holder into it. DownAfter is when another holder's record
	// counts as abandoned (DefaultDownAfter when 0).
	Holder    *Holder
	DownAfter time.Duration

	started time.Time
}

func (b *Beater) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// Beat writes the heartbeat once: a read, then a compare-and-swap put of
// the new record, retried when the record changed in between.
func (b *Beater) Beat(ctx context.Context) error {
	return b.write(ctx, false)
}

// Stop writes a last heartbeat marked stopped, so other hosts see at once
// that this one shut down cleanly.
func (b *Beater) Stop(ctx context.Context) error {
	return b.write(ctx, true)
}

func (b *Beater) write(ctx context.Context, stopped bool) error {
	if b.started.IsZero() {
		b.started = b.now().UTC()
	}
	hb := Heartbeat{Host: b.Host, Version: b.Version, Started: b.started, Stopped: stopped, Holder: b.Holder}
	if b.Traits != nil {
		hb.Traits = b.Traits()
	}
	if b.Count != nil {
		n, err := b.Count(ctx)
		if err != nil {
			return fmt.Errorf("heartbeat of %s: count instances: %w", b.Host, err)
		}
		hb.Instances = n
	}
	// Only this host writes its record: a conflict means another process
	// runs with the same host name (the holder check refuses a live one).
	_, err := store.Update(ctx, b.Store, Key(b.Host), func(cur store.Record, exists bool) ([]byte, error) {
		if exists && b.Holder != nil {
			if err := b.Holder.mayTake(cur, b.now(), b.DownAfter); err != nil {
				return nil, err
			}
		}
		hb.LastSeen = b.now().UTC()
		return json.Marshal(hb)
	})
	switch {
	case err == nil, errors.Is(err, ErrHostHeld): // mayTake's error names the holder
		return err
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("heartbeat of %s: %w; is another hostctl running with --host %s?", b.Host, err, b.Host)
	}
	return fmt.Errorf("heartbeat of %s: %w", b.Host, err)
}

// Run beats at once and then every Interval until ctx is done; failed
// beats are logged (the next one retries).
func (b *Beater) Run(ctx context.Context) {
	interval := b.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	log := b.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := b.Beat(ctx); err != nil && ctx.Err() == nil {
			log.Warn("heartbeat not written", "host", b.Host, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Judge turns a heartbeat into a Status at time now.
func Judge(hb Heartbeat, now time.Time, downAfter time.Duration) Status {
	if downAfter <= 0 {
		downAfter = DefaultDownAfter
	}
	age := now.Sub(hb.LastSeen)
	return Status{Heartbeat: hb, Age: age, Down: hb.Stopped || age > downAfter}
}

// Get returns the status of one host; store.ErrNotFound when it never beat.
func Get(ctx context.Context, st Records, host string, now time.Time, downAfter time.Duration) (Status, error) {
	rec, err := st.Record(ctx, Key(host))
	if err != nil {
		return Status{}, fmt.Errorf("host %s: %w", host, err)
	}
	hb, err := decode(rec)
	if err != nil {
		return Status{}, err
	}
	return Judge(hb, now, downAfter), nil
}

// List returns the status of every host that ever beat, sorted by name.
func List(ctx context.Context, st Records, now time.Time, downAfter time.Duration) ([]Status, error) {
	recs, err := st.Records(ctx, RecordPrefix)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	out := make([]Status, 0, len(recs))
	for _, rec := range recs {
		hb, err := decode(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, Judge(hb, now, downAfter))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out, nil
}

func decode(rec store.Record) (Heartbeat, error) {
	var hb Heartbeat
	if err := json.Unmarshal(rec.Value, &hb); err != nil {
		return Heartbeat{}, fmt.Errorf("heartbeat record %s: %w", rec.Key, err)
	}
	return hb, nil
}

// Registry answers questions about the hosts sharing a store, for the
// controller (controller.Hosts), the admin API and the metrics.
type Registry struct {
	Store Records
	// DownAfter is the silence after which a host is down
	// (DefaultDownAfter when 0).
	DownAfter time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (r Registry) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// HostDown tells whether host is down; a host that never wrote a
// heartbeat counts as down (there is nobody to protect).
func (r Registry) HostDown(ctx context.Context, host string) (bool, string, error) {
	st, err := Get(ctx, r.Store, host, r.now(), r.DownAfter)
	if errors.Is(err, store.ErrNotFound) {
		return true, "no heartbeat on record", nil
	}
	if err != nil {
		return false, "", err
	}
	return st.Down, describe(st), nil
}

// List returns the status of every host, sorted by name.
func (r Registry) List(ctx context.Context) ([]Status, error) {
	return List(ctx, r.Store, r.now(), r.DownAfter)
}

func describe(s Status) string {
	if s.Stopped {
		return fmt.Sprintf("stopped cleanly %s ago", s.Age.Round(time.Second))
	}
	return fmt.Sprintf("last seen %s ago", s.Age.Round(time.Millisecond))
}
