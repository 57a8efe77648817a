package guest

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vmeta/vmeta/guest/source"
	"github.com/vmeta/vmeta/guest/uevent"
)

// RunOptions tune the daemon.
type RunOptions struct {
	// PollInterval is how often the metadata is read again when nothing
	// happens: 60s.
	PollInterval time.Duration
	// MaxBackoff caps the pause between failed reads: 5m.
	MaxBackoff time.Duration
	// Debounce gathers a burst of device events into one pass: 500ms.
	Debounce time.Duration
	// Events, when set, replaces the kernel's uevents (tests).
	Events <-chan uevent.Event
	// Ready is called once, after the first pass: when it applied the
	// metadata, or when the metadata could not be read (the service may
	// only answer once the network is up, which must not wait for the
	// agent). The daemon tells systemd it is ready then.
	Ready func()
}

// firstReadBackoff caps the pause between failed reads until a first
// document was read (a guest without a config drive whose network comes up
// after the agent started).
const firstReadBackoff = 4 * time.Second

// fastPolls are the pauses of the quick re-reads after a device came or
// went: the host updates the metadata around a hot-plug, and which comes
// first is not fixed.
var fastPolls = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 15 * time.Second}

// Run applies the metadata, then follows kernel device events and
// metadata changes until ctx ends: device events (a disk, NIC or virtiofs
// device added or removed) re-apply the current metadata and re-read it
// a few times in quick succession; a config drive's media change re-reads
// it at once; otherwise it is re-read every PollInterval, and after a
// failure with exponential backoff (with jitter) up to MaxBackoff. A
// document that cannot be read or is invalid changes nothing.
func (a *Agent) Run(ctx context.Context, opts RunOptions) error {
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Minute
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Minute
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 500 * time.Millisecond
	}
	a.noShareWait = true
	defer func() { a.noShareWait = false }()
	events := opts.Events
	if events == nil {
		ch := make(chan uevent.Event, 256)
		events = ch
		go func() {
			err := uevent.Monitor(ctx, ch, func(err error) { a.log.Warn("uevents", "err", err) })
			if err != nil && ctx.Err() == nil {
				a.log.Warn("no kernel uevents; relying on metadata polling only", "err", err)
			}
		}()
	}

	var (
		doc        *source.Document
		lastErr    string
		backoff    = time.Second
		fast       []time.Duration
		needFetch  = true
		needApply  = false
		pending    = false
		retryPause = 2 * time.Second
		ready      = false
		reported   = map[string]bool{} // problems logged by the last pass
		firstEvent time.Time           // the oldest event not yet handled
	)
	poll := time.NewTimer(0)
	defer poll.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()

	signalReady := func() {
		if !ready {
			ready = true
			if opts.Ready != nil {
				opts.Ready()
			}
		}
	}
	pass := func() {
		if needFetch {
			needFetch = false
			d, err := a.Fetch(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if err.Error() != lastErr {
					a.log.Error("metadata not read; nothing changed", "source", a.cfg.Source.String(), "err", err)
					lastErr = err.Error()
				}
				a.recordError(err)
				signalReady()
				wait := backoff + time.Duration(rand.Int64N(int64(backoff/4)+1))
				poll.Reset(wait)
				if doc == nil {
					// Nothing read yet: the service may answer as soon as
					// the network is up, so keep asking every few seconds.
					backoff = min(backoff*2, opts.MaxBackoff, firstReadBackoff)
					return
				}
				backoff = min(backoff*2, opts.MaxBackoff)
			} else {
				lastErr = ""
				if doc == nil || d.Digest != doc.Digest || d.Origin != doc.Origin || d.Revision != doc.Revision {
					needApply = true
					if doc != nil {
						a.log.Info("metadata changed", "origin", d.Origin, "revision", d.Revision)
					}
				}
				doc = d
				a.watchMedia(d)
				switch {
				case len(d.Problems()) > 0:
					// Another transport that is there failed: a drive read
					// while its medium changes, a broken firmware entry.
					// Its document may be the newest: read again soon,
					// backing off while it keeps failing, never less often
					// than the poll interval.
					poll.Reset(backoff + time.Duration(rand.Int64N(int64(backoff/4)+1)))
					backoff = min(backoff*2, opts.MaxBackoff, opts.PollInterval)
				case len(fast) > 0:
					backoff = time.Second
					poll.Reset(fast[0])
					fast = fast[1:]
				default:
					backoff = time.Second
					poll.Reset(opts.PollInterval)
				}
			}
		}
		if !needApply || doc == nil {
			return
		}
		needApply = false
		rep, err := a.ApplyDocument(ctx, doc)
		if err != nil {
			a.log.Error("apply", "err", err)
			return
		}
		a.logReport(rep, reported)
		reported = map[string]bool{}
		for _, p := range rep.State.Problems {
			reported[p] = true
		}
		if rep.Pending {
			if !pending {
				retryPause = 2 * time.Second
			}
			pending = true
			retry.Reset(retryPause)
			retryPause = min(retryPause*2, time.Minute)
		} else {
			pending = false
			retry.Stop()
		}
		signalReady()
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if !uevent.Relevant(e) {
				continue
			}
			a.log.Debug("uevent", "action", e.Action, "devpath", e.DevPath, "subsystem", e.Subsystem)
			switch {
			case uevent.MediaChange(e):
				a.log.Info("medium changed; reading the metadata again", "devpath", e.DevPath)
				needFetch = true
			case e.Action == "change":
				continue // a partition table re-read, a resize: nothing the agent sets depends on it
			case uevent.Synthetic(e):
				// udev's coldplug (the agent starts before it) or a
				// trigger: the device was there already and udev runs
				// its rules again. Check that the records still match
				// once the burst is over; the metadata did not change.
				needApply = true
			default:
				needApply = true
				needFetch = true
				fast = append([]time.Duration(nil), fastPolls...)
			}
			// Wait for the burst to end, but not for ever: a device
			// that keeps sending events must not starve the others.
			if firstEvent.IsZero() {
				firstEvent = time.Now()
			}
			if time.Since(firstEvent) < maxDebounce {
				debounce.Reset(opts.Debounce)
			}
		case <-debounce.C:
			firstEvent = time.Time{}
			pass()
		case <-poll.C:
			needFetch = true
			pass()
		case <-retry.C:
			needApply = true
			pass()
		}
	}
}

// maxDebounce bounds how long a stream of device events delays a pass.
const maxDebounce = 3 * time.Second

// logReport logs a pass: what changed, and the problems not already
// logged by the previous pass (a daemon repeating the same warning every
// minute drowns the log).
func (a *Agent) logReport(rep *Report, reported map[string]bool) {
	st := rep.State
	if len(rep.Changes) > 0 {
		a.log.Info("applied", "origin", st.Origin, "source", st.Source, "revision", st.Revision, "devices", len(st.Devices), "changes", strings.Join(rep.Changes, "; "),
			"problems", len(st.Problems), "since_start", time.Since(a.cfg.Started).Round(time.Millisecond), "peak_rss", PeakRSS())
	} else {
		a.log.Debug("nothing to change", "origin", st.Origin, "devices", len(st.Devices))
	}
	for _, p := range st.Problems {
		if !reported[p] {
			a.log.Warn("problem", "what", p)
		}
	}
	for p := range reported {
		if !slices.Contains(st.Problems, p) {
			a.log.Info("problem resolved", "what", p)
		}
	}
}

// watchMedia makes sure the kernel reports media changes of a cdrom the
// document came from: it polls only when asked (udev's 60-block.rules
// sets events_dfl_poll_msecs; a minimal initramfs does not), and without
// polling a swapped config drive goes unnoticed until the next periodic
// read.
func (a *Agent) watchMedia(d *source.Document) {
	origins := []string{d.Origin}
	for _, s := range d.Sources {
		if s.Origin != d.Origin {
			origins = append(origins, s.Origin) // a drive read but not used (the firmware had the same revision)
		}
	}
	for _, o := range origins {
		if dev, ok := strings.CutPrefix(o, "config drive "); ok {
			a.watchMediaOf(dev)
		}
	}
}

func (a *Agent) watchMediaOf(dev string) {
	name := filepath.Base(dev)
	if !strings.HasPrefix(name, "sr") {
		return
	}
	p := filepath.Join(a.cfg.SysRoot, "block", name, "events_poll_msecs")
	cur, err := os.ReadFile(p)
	if err != nil {
		return
	}
	v := strings.TrimSpace(string(cur))
	if v != "-1" && v != "0" {
		return // polled already
	}
	if v == "-1" {
		def, _ := os.ReadFile(filepath.Join(a.cfg.SysRoot, "module", "block", "parameters", "events_dfl_poll_msecs"))
		if d := strings.TrimSpace(string(def)); d != "" && d != "0" {
			return // the default polls
		}
	}
	if err := os.WriteFile(p, []byte("2000"), 0o644); err != nil {
		a.log.Warn("cannot make the kernel poll the config drive for media changes", "device", dev, "err", err)
		return
	}
	a.log.Info("kernel now polls the config drive for media changes", "device", dev, "interval", "2s")
}

// PeakRSS returns the process's peak resident set size as the kernel
// counts it (VmHWM in /proc/self/status, e.g. "14372 kB"), or "" where
// there is no such file.
func PeakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
