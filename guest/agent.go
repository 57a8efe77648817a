package guest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vmeta/vmeta/guest/altname"
	"github.com/vmeta/vmeta/guest/match"
	"github.com/vmeta/vmeta/guest/shares"
	"github.com/vmeta/vmeta/guest/source"
	"github.com/vmeta/vmeta/guest/sysfs"
	"github.com/vmeta/vmeta/guest/udev"
	"github.com/vmeta/vmeta/internal/atomicfile"
)

// Udev is what the agent asks of udev (udev.Udevadm; a fake in tests).
type Udev interface {
	Reload(ctx context.Context) error
	// Trigger sends change events to the devices and waits until udevd
	// has processed them (only them: see udev.Udevadm.Trigger).
	Trigger(ctx context.Context, sysPaths []string) error
}

// UdevDB reads udev's database (udev.DB; a fake directory in tests).
type UdevDB interface {
	Running() bool
	Entry(id string) (udev.Entry, error)
}

// AltNamer changes alternative interface names (package altname; a fake
// in tests).
type AltNamer interface {
	Get(index int) (altname.Link, error)
	Add(index int, name string) error
	Del(index int, name string) error
}

type netlinkAltNamer struct{}

func (netlinkAltNamer) Get(i int) (altname.Link, error) { return altname.Get(i) }
func (netlinkAltNamer) Add(i int, n string) error       { return altname.Add(i, n) }
func (netlinkAltNamer) Del(i int, n string) error       { return altname.Del(i, n) }

// Config configures an Agent. The zero value of each field means the
// default on a real guest.
type Config struct {
	// Source is where the metadata comes from: a config drive found by
	// label, else the metadata service (source.Auto).
	Source source.Source
	// SysRoot and DevRoot: "/sys" and "/dev".
	SysRoot, DevRoot string
	// RulesFile: udev.DefaultRulesFile.
	RulesFile string
	// StateDir: DefaultStateDir.
	StateDir string
	// ShareRoot is where shares are mounted, <ShareRoot>/<tag>:
	// shares.DefaultRoot.
	ShareRoot string
	// ShareWait is how long a pass keeps retrying the mount of a share
	// whose virtiofs device is not there (yet): 5s when 0, no retry when
	// negative. The daemon tries once per pass and retries in later
	// passes instead.
	ShareWait time.Duration
	// SettleTimeout bounds the wait for udevd to process the change events
	// the agent sends: 30s.
	SettleTimeout time.Duration
	// NoAltNames leaves interface names alone.
	NoAltNames bool

	Udev     Udev
	UdevDB   UdevDB
	AltNames AltNamer
	Mounter  shares.Mounter
	Log      *slog.Logger
	// Started is when the process started (for the time-to-applied
	// figure in the logs); now when zero.
	Started time.Time
}

// Agent applies device metadata to the guest.
type Agent struct {
	cfg Config
	log *slog.Logger
	// noShareWait makes a pass try each missing share once (the daemon
	// retries in later passes instead of holding up the first one).
	noShareWait bool
}

// New returns an agent with cfg's defaults filled in.
func New(cfg Config) *Agent {
	if cfg.SysRoot == "" {
		cfg.SysRoot = sysfs.DefaultRoot
	}
	if cfg.DevRoot == "" {
		cfg.DevRoot = "/dev"
	}
	if cfg.Source == nil {
		cfg.Source = &source.Auto{Firmware: FirmwareSource(cfg.SysRoot), Drive: &source.ConfigDrive{SysRoot: cfg.SysRoot, DevRoot: cfg.DevRoot}, HTTP: &source.HTTP{}}
	}
	if cfg.RulesFile == "" {
		cfg.RulesFile = udev.DefaultRulesFile
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.ShareRoot == "" {
		cfg.ShareRoot = shares.DefaultRoot
	}
	if cfg.ShareWait == 0 {
		cfg.ShareWait = 5 * time.Second
	}
	if cfg.SettleTimeout == 0 {
		cfg.SettleTimeout = 30 * time.Second
	}
	if cfg.Udev == nil {
		cfg.Udev = &udev.Udevadm{}
	}
	if cfg.UdevDB == nil {
		cfg.UdevDB = udev.DB{}
	}
	if cfg.AltNames == nil {
		cfg.AltNames = netlinkAltNamer{}
	}
	if cfg.Mounter == nil {
		cfg.Mounter = shares.System{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Started.IsZero() {
		cfg.Started = time.Now()
	}
	return &Agent{cfg: cfg, log: cfg.Log}
}

// FirmwareSource is the firmware source for sysfs at sysRoot: on another
// sysfs than the system's (tests, a chroot) the agent reads
// <sysRoot>/firmware/qemu_fw_cfg and loads no module.
func FirmwareSource(sysRoot string) *source.Firmware {
	if sysRoot == "" || filepath.Clean(sysRoot) == sysfs.DefaultRoot {
		return &source.Firmware{}
	}
	dir := filepath.Join(sysRoot, "firmware", "qemu_fw_cfg")
	return &source.Firmware{Dir: dir, Load: func(context.Context) error {
		return fmt.Errorf("not loading qemu_fw_cfg for the sysfs at %s", sysRoot)
	}}
}

// ErrOlderRevision is returned by ApplyDocument for a document of the
// instance whose revision is older than the one applied before.
var ErrOlderRevision = errors.New("older metadata")

// Report is the outcome of one pass.
type Report struct {
	State *State
	// Changes lists what the pass changed; empty when the system already
	// matched the metadata.
	Changes []string
	// Pending is true when something could not be applied yet and a
	// later pass may succeed: a share whose device is missing, udev that
	// did not process or apply the rules (a reload racing the trigger, an
	// event queue too slow for the settle timeout, udevd not started).
	// The daemon retries with backoff.
	Pending bool
}

// Problems are the pass's problems (unmatched entries, failures).
func (r *Report) Problems() []string { return r.State.Problems }

// Fetch reads the metadata from the configured source.
func (a *Agent) Fetch(ctx context.Context) (*source.Document, error) {
	start := time.Now()
	doc, err := a.cfg.Source.Fetch(ctx)
	if err == nil {
		a.log.Debug("metadata read", "origin", doc.Origin, "revision", doc.Revision, "devices", len(doc.Devices), "elapsed", time.Since(start).Round(time.Millisecond))
	}
	return doc, err
}

// Apply reads the metadata and applies it. When the metadata cannot be
// read or is invalid it changes nothing, records the error in the state
// and returns it.
func (a *Agent) Apply(ctx context.Context) (*Report, error) {
	doc, err := a.Fetch(ctx)
	if err != nil {
		a.recordError(err)
		return nil, err
	}
	return a.ApplyDocument(ctx, doc)
}

// recordError notes a failed read in the state without touching anything
// else.
func (a *Agent) recordError(err error) {
	unlock, lerr := lock(a.cfg.StateDir)
	if lerr != nil {
		a.log.Warn("cannot record the read error in the state", "read_err", err, "err", lerr)
		return
	}
	defer unlock()
	st, rerr := ReadState(a.cfg.StateDir)
	if rerr != nil {
		st = &State{}
	}
	st.LastError, st.LastErrorTime = err.Error(), time.Now().UTC()
	if werr := writeState(a.cfg.StateDir, st); werr != nil {
		a.log.Warn("cannot record the read error in the state", "read_err", err, "err", werr)
	}
}

// ApplyDocument applies doc: match the devices, write the udev rules and
// make udev apply them to the affected devices, set alternative names,
// mount and unmount shares, and record the state.
func (a *Agent) ApplyDocument(ctx context.Context, doc *source.Document) (*Report, error) {
	unlock, err := lock(a.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	prev, err := ReadState(a.cfg.StateDir)
	if err != nil {
		if !errors.Is(err, ErrNoState) {
			a.log.Warn("previous state unreadable; starting afresh", "err", err)
		}
		prev = &State{}
	}
	current := doc.Revision
	if prev.UUID != "" && prev.UUID == doc.UUID && doc.Revision > 0 && doc.Revision < prev.Revision &&
		doc.Digest != "" && doc.Digest == prev.Digest {
		// An older revision with the devices applied: hostctl leaves the
		// firmware entries (and their revision) alone while a publish
		// changes nothing they carry, so they are current. Compare
		// content, not revisions; the state keeps the newer revision.
		current = prev.Revision
	}
	if prev.UUID != "" && prev.UUID == doc.UUID && doc.Revision > 0 && current < prev.Revision {
		// A transport that lags behind (the firmware after the drive
		// carried a newer revision, and the drive is gone): what was
		// applied stays.
		err := fmt.Errorf("%w: %s carries revision %d of the metadata, older than revision %d applied from %s; nothing changed",
			ErrOlderRevision, doc.Origin, doc.Revision, prev.Revision, prev.Origin)
		prev.LastError, prev.LastErrorTime = err.Error(), time.Now().UTC()
		if werr := writeState(a.cfg.StateDir, prev); werr != nil {
			a.log.Warn("cannot record the error in the state", "err", werr)
		}
		return nil, err
	}
	step := time.Now()
	inv, err := sysfs.Scanner{Root: a.cfg.SysRoot, DevRoot: a.cfg.DevRoot}.Scan()
	if err != nil {
		return nil, err
	}
	results := match.Devices(doc.Devices, inv)
	p := buildPlan(results, inv, a.cfg.ShareRoot)
	a.log.Debug("devices scanned and matched", "elapsed", time.Since(step).Round(time.Millisecond))
	rep := &Report{State: &State{Origin: doc.Origin, UUID: doc.UUID, Digest: doc.Digest, Ignored: doc.Ignored,
		Source: doc.Source, Revision: current, Sources: doc.Sources}}
	st := rep.State
	st.Problems = append(st.Problems, doc.Problems()...)
	st.Problems = append(st.Problems, doc.Ignored...)
	st.Problems = append(st.Problems, p.problems...)

	// Debug timings of the steps: how long the agent's unit holds the
	// boot, and where that time goes.
	step = time.Now()
	if err := a.applyUdev(ctx, p, rep); err != nil {
		st.Problems = append(st.Problems, err.Error())
		rep.Pending = true
	}
	a.log.Debug("udev applied", "elapsed", time.Since(step).Round(time.Millisecond))
	if !a.cfg.NoAltNames {
		a.applyAltNames(p, prev, rep)
	}
	step = time.Now()
	mounts := a.applyShares(ctx, p, prev, rep)
	a.log.Debug("shares applied", "elapsed", time.Since(step).Round(time.Millisecond))

	for _, r := range results {
		st.Devices = append(st.Devices, deviceState(&r, mounts))
	}
	st.Time = time.Now().UTC()
	if err := writeState(a.cfg.StateDir, st); err != nil {
		st.Problems = append(st.Problems, err.Error())
	}
	return rep, nil
}

// shareOutcome is what became of one share in a pass.
type shareOutcome struct {
	mountPoint string
	err        error
}

func deviceState(r *match.Result, mounts map[string]shareOutcome) DeviceState {
	d := r.Device
	ds := DeviceState{Type: d.Type, Bus: d.Bus, Address: d.Address, MAC: d.MAC, Serial: d.Serial, Tags: d.Tags,
		Encrypted: d.Encrypted != nil && *d.Encrypted, ShareTag: d.Tag, Status: string(r.Status), By: r.By, Reason: r.Reason, Notes: r.Notes}
	if r.Disk != nil {
		ds.Node, ds.SysPath = r.Disk.DevNode, r.Disk.DevPath
	}
	if r.NIC != nil {
		ds.Interface, ds.IfIndex, ds.SysPath = r.NIC.Name, r.NIC.Index, r.NIC.DevPath
	}
	if o, ok := mounts[d.Tag]; ok && d.Type == "share" {
		switch {
		case o.err == nil:
			ds.Status, ds.MountPoint, ds.Reason = "mounted", o.mountPoint, ""
		case errors.Is(o.err, shares.ErrNoTag):
			ds.Status, ds.Reason = "waiting", o.err.Error()
		default:
			ds.Status, ds.Reason = "failed", o.err.Error()
		}
	}
	return ds
}

// applyUdev writes the rules and makes udev apply them to every device
// whose udev record differs from what the plan wants.
func (a *Agent) applyUdev(ctx context.Context, p *plan, rep *Report) error {
	data, err := p.rules.Render()
	if err != nil {
		return fmt.Errorf("udev rules: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(a.cfg.RulesFile), 0o755); err != nil {
		return fmt.Errorf("rules directory: %w", err)
	}
	changed, err := atomicfile.WriteIfChanged(a.cfg.RulesFile, data, 0o644)
	if err != nil {
		return err
	}
	if changed {
		rep.Changes = append(rep.Changes, "wrote "+a.cfg.RulesFile)
	}
	db := a.cfg.UdevDB
	if !db.Running() {
		return errors.New("udevd is not running: the rules are written and apply once it starts")
	}
	if changed {
		step := time.Now()
		if err := a.cfg.Udev.Reload(ctx); err != nil {
			return err
		}
		a.log.Debug("udev rules reloaded", "elapsed", time.Since(step).Round(time.Millisecond))
	}
	stale, err := a.stale(p)
	if err != nil {
		return err
	}
	if len(stale) == 0 {
		return nil
	}
	paths := make([]string, len(stale))
	names := make([]string, len(stale))
	for i, id := range stale {
		paths[i] = filepath.Join(a.cfg.SysRoot, p.sysPath[id])
		names[i] = p.names[id]
	}
	tctx, cancel := context.WithTimeout(ctx, a.cfg.SettleTimeout)
	step := time.Now()
	err = a.cfg.Udev.Trigger(tctx, paths)
	cancel()
	a.log.Debug("udev processed the change events", "devices", strings.Join(names, ", "), "elapsed", time.Since(step).Round(time.Millisecond))
	if err != nil {
		if ctx.Err() == nil && tctx.Err() != nil {
			return fmt.Errorf("udev did not process the change events of %s within %s: %w", strings.Join(names, ", "), a.cfg.SettleTimeout, err)
		}
		return err
	}
	rep.Changes = append(rep.Changes, "udev applied tags to "+strings.Join(names, ", "))
	still, err := a.stale(p)
	if err != nil {
		return err
	}
	if len(still) > 0 {
		n := make([]string, len(still))
		for i, id := range still {
			n[i] = p.names[id]
		}
		return fmt.Errorf("udev did not apply the rules to %s (is %s read by this udev?)", strings.Join(n, ", "), a.cfg.RulesFile)
	}
	return nil
}

// stale lists the database ids whose udev record differs from the plan.
func (a *Agent) stale(p *plan) ([]string, error) {
	var out []string
	for id := range p.sysPath {
		e, err := a.cfg.UdevDB.Entry(id)
		if err != nil {
			return nil, err
		}
		if !recordMatches(e, p.want[id]) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// recordMatches compares a udev record with what is wanted: the two
// properties exactly, and the by-tag links (no more, no fewer).
func recordMatches(e udev.Entry, w wantProps) bool {
	if e.Props[udev.PropTags] != w.tags {
		return false
	}
	enc := ""
	if w.encrypted {
		enc = "1"
	}
	if e.Props[udev.PropEncrypted] != enc {
		return false
	}
	var have []string
	for _, l := range e.Links {
		if strings.HasPrefix(l, udev.LinkDir+"/") {
			have = append(have, l)
		}
	}
	want := slices.Clone(w.links)
	slices.Sort(have)
	slices.Sort(want)
	return slices.Equal(have, want)
}

// applyAltNames gives each tagged NIC one alternative name per tag and
// removes the names the agent added earlier that are no longer wanted.
func (a *Agent) applyAltNames(p *plan, prev *State, rep *Report) {
	st := rep.State
	keep := map[int]map[string]bool{}
	for idx, names := range p.altnames {
		link, err := a.cfg.AltNames.Get(idx)
		if err != nil {
			st.Problems = append(st.Problems, fmt.Sprintf("NIC %d: %v", idx, err))
			continue
		}
		keep[idx] = map[string]bool{}
		for _, n := range names {
			keep[idx][n] = true
			if slices.Contains(link.AltNames, n) || link.Name == n {
				if wasAdded(prev, idx, p.nicMAC[idx], n) {
					st.AltNames = append(st.AltNames, AddedAltName{IfIndex: idx, MAC: p.nicMAC[idx], Name: n})
				}
				continue
			}
			if err := a.cfg.AltNames.Add(idx, n); err != nil {
				st.Problems = append(st.Problems, fmt.Sprintf("NIC %s: %v", link.Name, err))
				continue
			}
			st.AltNames = append(st.AltNames, AddedAltName{IfIndex: idx, MAC: p.nicMAC[idx], Name: n})
			rep.Changes = append(rep.Changes, fmt.Sprintf("altname %s on %s", n, link.Name))
		}
	}
	for _, old := range prev.AltNames {
		if keep[old.IfIndex][old.Name] {
			continue
		}
		link, err := a.cfg.AltNames.Get(old.IfIndex)
		if err != nil || !slices.Contains(link.AltNames, old.Name) {
			continue // the interface or the name is gone already
		}
		if err := a.cfg.AltNames.Del(old.IfIndex, old.Name); err != nil {
			st.Problems = append(st.Problems, fmt.Sprintf("NIC %s: %v", link.Name, err))
			st.AltNames = append(st.AltNames, old)
			continue
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("removed altname %s from %s", old.Name, link.Name))
	}
}

func wasAdded(prev *State, idx int, mac, name string) bool {
	for _, o := range prev.AltNames {
		if o.IfIndex == idx && o.MAC == mac && o.Name == name {
			return true
		}
	}
	return false
}

// applyShares mounts every share of the plan that is not mounted yet and
// unmounts the shares the agent mounted that the metadata no longer
// lists. It returns what became of each share.
func (a *Agent) applyShares(ctx context.Context, p *plan, prev *State, rep *Report) map[string]shareOutcome {
	st := rep.State
	out := map[string]shareOutcome{}
	mounter := a.cfg.Mounter
	ms, err := mounter.Mounts()
	if err != nil {
		st.Problems = append(st.Problems, err.Error())
		return out
	}
	wanted := map[string]bool{}
	for _, s := range p.shares {
		wanted[s.tag] = true
		if at := shares.TagMounts(ms, s.tag); len(at) > 0 {
			mp := at[0]
			if slices.Contains(at, s.dir) {
				mp = s.dir
			}
			out[s.tag] = shareOutcome{mountPoint: mp}
			if agentMounted(prev, s.tag, mp) {
				st.Mounts = append(st.Mounts, AgentMount{Tag: s.tag, Dir: mp})
			}
			continue
		}
		if m, busy := shares.MountedAt(ms, s.dir); busy {
			err := fmt.Errorf("%s already has %s (%s) mounted", s.dir, m.Source, m.FSType)
			out[s.tag] = shareOutcome{err: err}
			st.Problems = append(st.Problems, fmt.Sprintf("share %q: %v", s.tag, err))
			continue
		}
		if err := a.mountShare(ctx, s); err != nil {
			out[s.tag] = shareOutcome{err: err}
			st.Problems = append(st.Problems, fmt.Sprintf("share %q: %v", s.tag, err))
			if errors.Is(err, shares.ErrNoTag) {
				rep.Pending = true
			}
			continue
		}
		out[s.tag] = shareOutcome{mountPoint: s.dir}
		st.Mounts = append(st.Mounts, AgentMount{Tag: s.tag, Dir: s.dir})
		rep.Changes = append(rep.Changes, fmt.Sprintf("mounted share %s at %s", s.tag, s.dir))
	}
	for _, old := range prev.Mounts {
		if wanted[old.Tag] {
			continue
		}
		if m, ok := shares.MountedAt(ms, old.Dir); !ok || m.FSType != shares.FSType || m.Source != old.Tag {
			continue // unmounted by someone else, or something else is there now
		}
		if err := mounter.Unmount(old.Dir); err != nil {
			st.Problems = append(st.Problems, fmt.Sprintf("share %q is gone from the metadata but stays mounted: %v", old.Tag, err))
			st.Mounts = append(st.Mounts, old)
			continue
		}
		_ = os.Remove(old.Dir) // only if empty
		rep.Changes = append(rep.Changes, fmt.Sprintf("unmounted share %s from %s", old.Tag, old.Dir))
	}
	return out
}

func agentMounted(prev *State, tag, dir string) bool {
	for _, m := range prev.Mounts {
		if m.Tag == tag && m.Dir == dir {
			return true
		}
	}
	return false
}

// mountShare mounts one share, retrying for ShareWait while its device is
// missing (hot-plugged a moment ago, or not yet probed).
func (a *Agent) mountShare(ctx context.Context, s shareWant) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	if s.absent {
		// The kernel lists virtiofs tags and this one is not offered:
		// no point in trying before a device event.
		return fmt.Errorf("%w: the host offers no virtiofs tag %q", shares.ErrNoTag, s.tag)
	}
	wait := max(a.cfg.ShareWait, 0)
	if a.noShareWait {
		wait = 0
	}
	deadline := time.Now().Add(wait)
	pause := 250 * time.Millisecond
	for {
		err := a.cfg.Mounter.Mount(s.tag, s.dir)
		if err == nil || !errors.Is(err, shares.ErrNoTag) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(pause*2, 2*time.Second)
	}
}
