package devices

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Stream is the event stream of device events.
const Stream = "devices"

// Event types on Stream; each carries the device record (Device).
const (
	EventBurned   = "device.burned"   // a one-time-use device was claimed (or healed) into reserved
	EventReleased = "device.released" // a burned device was released: it needs cleaning
	EventCleaned  = "device.cleaned"  // an operator said it is clean: back in the pool
	EventHook     = "device.cleanup_hook"
)

// ErrUnavailable is wrapped (with store.ErrConflict) when no device of an
// alias is free.
var ErrUnavailable = errkind.New(errkind.Conflict, "no device available")

// Emitter appends audit events (an *events.Log).
type Emitter interface {
	Emit(ctx context.Context, stream, typ string, payload any) (events.Event, error)
}

// Store is what the inventory needs: its host's record group, and records
// for the index of hosts that have an inventory (--all-hosts).
type Store interface {
	store.Groups
	store.Records
}

// Options configure an Inventory.
type Options struct {
	// Host names this host; its devices are the group "device/<host>".
	Host string
	// Spec is the device spec (nil: no devices are offered).
	Spec *Spec
	// Events receives the device events (nil: none are emitted).
	Events Emitter
	// Hook is the cleanup hook run when a burned device is released (nil:
	// none).
	Hook   *Hook
	Logger *slog.Logger
}

// Inventory is one host's device inventory in the store.
type Inventory struct {
	st     Store
	host   string
	group  string
	spec   atomic.Pointer[Spec]
	events Emitter
	hook   *Hook
	log    *slog.Logger
	now    func() time.Time

	conflicts atomic.Int64
}

// Conflicts is how many compare-and-swap writes of this Inventory lost to
// another writer and were retried.
func (inv *Inventory) Conflicts() int64 { return inv.conflicts.Load() }

// keyPrefix starts the key of a device record in the host's group.
const keyPrefix = "pci/"

// hostIndexPrefix starts the record naming each host with an inventory.
const hostIndexPrefix = "device-host/"

// New returns host's inventory in st.
func New(st Store, opts Options) (*Inventory, error) {
	if err := store.CheckKey("device/" + opts.Host); err != nil || opts.Host == "" {
		return nil, fmt.Errorf("device inventory: host name %q cannot name a record group", opts.Host)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	spec := opts.Spec
	if spec == nil {
		spec = &Spec{}
	}
	inv := &Inventory{st: st, host: opts.Host, group: "device/" + opts.Host,
		events: opts.Events, hook: opts.Hook, log: log, now: time.Now}
	inv.spec.Store(spec)
	if inv.hook != nil {
		inv.hook.report = inv.recordHook
	}
	return inv, nil
}

// SetSpec replaces the device spec (a re-read spec file); the next Sync
// applies it (new aliases, one-time-use marks, devices no longer matched).
func (inv *Inventory) SetSpec(s *Spec) {
	if s == nil {
		s = &Spec{}
	}
	inv.spec.Store(s)
}

// Host returns the host the inventory belongs to.
func (inv *Inventory) Host() string { return inv.host }

// Consumer is the instance claiming devices.
type Consumer struct {
	UUID string
	Name string
}

type entry struct {
	dev     Device
	version int64
}

func (inv *Inventory) load(ctx context.Context, group string) ([]entry, error) {
	recs, err := inv.st.GroupRecords(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("device inventory: %w", err)
	}
	out := make([]entry, 0, len(recs))
	for _, r := range recs {
		if !strings.HasPrefix(r.Key, keyPrefix) {
			continue
		}
		d, err := decodeDevice(r.Value)
		if err != nil {
			return nil, fmt.Errorf("device inventory: record %s of %s: %w", r.Key, group, err)
		}
		d.Generation = r.Version
		d.NeedsCleaning = needsCleaning(d)
		out = append(out, entry{dev: d, version: r.Version})
	}
	return out, nil
}

// needsCleaning is the specification's definition, by the counters alone
// (total = reserved, used = 0): a device burned while it was one-time-use
// still needs cleaning after the operator un-marks it, and nothing else
// sets reserved.
func needsCleaning(d Device) bool {
	return d.Total > 0 && d.Reserved >= d.Total && d.Used == 0
}

func putOp(d Device, expect int64) store.GroupOp {
	d.NeedsCleaning = needsCleaning(d)
	d.Generation = 0           // the record's version is the generation
	body, _ := encodeDevice(d) // nothing in a Device fails to encode
	return store.GroupOp{Key: keyPrefix + d.Address, Value: body, ExpectVersion: expect}
}

// commit writes ops and returns the devices as written (with their new
// generation).
func (inv *Inventory) commit(ctx context.Context, ops []store.GroupOp, devs []Device) ([]Device, error) {
	recs, err := inv.st.CommitGroup(ctx, inv.group, ops)
	if err != nil {
		return nil, err
	}
	out := make([]Device, len(devs))
	for i := range devs {
		out[i] = devs[i]
		out[i].Generation = recs[i].Version
		out[i].NeedsCleaning = needsCleaning(out[i])
	}
	return out, nil
}

// retry runs fn until it does not conflict (store.RetryConflicts),
// counting the conflicts; a device unavailable or a refusal is a
// conflict that another attempt would not change.
func (inv *Inventory) retry(ctx context.Context, what string, fn func() error) error {
	return store.RetryConflicts(ctx, what, func() error {
		err := fn()
		switch {
		case errors.Is(err, ErrUnavailable), errors.Is(err, errRefused):
			return store.Final(err)
		case errors.Is(err, store.ErrConflict):
			inv.conflicts.Add(1)
		}
		return err
	})
}

// errRefused marks a conflict that retrying does not change (a device in
// use cannot be cleaned); refusal carries it.
var errRefused = errors.New("refused")

// refusal is a conflict (store.ErrConflict, so 409) that retrying does not
// change; its message is the whole story.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Is(target error) bool {
	return target == errRefused || target == store.ErrConflict || target == errkind.Conflict
}

// Sync brings the inventory in line with the devices found and the spec:
// a record per matched device (created with total 1, reserved 0, used 0),
// alias, traits and flags updated, devices no longer found kept but not
// present (deleted when neither used nor reserved). It heals a
// one-time-use device that is in use but not reserved (marked one-time-use
// while allocated) into reserved = total. It never lowers reserved.
func (inv *Inventory) Sync(ctx context.Context, found []Found) ([]Device, error) {
	matched, err := inv.spec.Load().Match(found)
	if err != nil {
		return nil, err
	}
	if _, err := inv.st.PutRecord(ctx, hostIndexPrefix+inv.host, []byte(`{}`), -1); err != nil {
		return nil, fmt.Errorf("device inventory: index host %s: %w", inv.host, err)
	}
	foundAt := map[string]Found{}
	for _, f := range found {
		foundAt[f.Address] = f
	}
	var healed []Device
	err = inv.retry(ctx, "sync devices", func() error {
		cur, err := inv.load(ctx, inv.group)
		if err != nil {
			return err
		}
		byAddr := map[string]entry{}
		for _, e := range cur {
			byAddr[e.dev.Address] = e
		}
		var ops []store.GroupOp
		var devs []Device
		healed = healed[:0]
		now := inv.now().UTC()
		seen := map[string]bool{}
		for _, m := range matched {
			seen[m.Address] = true
			e, exists := byAddr[m.Address]
			d := e.dev
			if !exists {
				d = Device{Address: m.Address, Host: inv.host, Total: 1}
			}
			d.VendorID, d.ProductID, d.Class = m.VendorID, m.ProductID, m.Class
			d.Alias, d.OneTimeUse, d.LiveMigratable, d.Present = m.Entry.Alias, m.Entry.OneTimeUse, m.Entry.LiveMigratable, true
			d.Traits = traits(d)
			if d.OneTimeUse && d.Used > 0 && d.Reserved < d.Total {
				d.Reserved = d.Total // heal: marked one-time-use while allocated
				d.BurnedAt = &now
				healed = append(healed, d)
			}
			if exists && same(d, e.dev) {
				continue
			}
			ops = append(ops, putOp(d, e.version))
			devs = append(devs, d)
		}
		for _, e := range cur {
			if seen[e.dev.Address] {
				continue
			}
			if e.dev.Used == 0 && e.dev.Reserved == 0 {
				ops = append(ops, store.GroupOp{Key: keyPrefix + e.dev.Address, Delete: true, ExpectVersion: e.version})
				devs = append(devs, e.dev)
				continue
			}
			d := e.dev
			d.Present = false
			if f, ok := foundAt[d.Address]; ok && d.Alias == "" {
				// A device named directly in pci_devices: its ids, for the
				// operator and the cleanup workflow (which wipes by class).
				d.VendorID, d.ProductID, d.Class = f.VendorID, f.ProductID, f.Class
			}
			if !same(d, e.dev) {
				ops = append(ops, putOp(d, e.version))
				devs = append(devs, d)
			}
		}
		if len(ops) == 0 {
			return nil
		}
		_, err = inv.commit(ctx, ops, devs)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sync devices of %s: %w", inv.host, err)
	}
	for _, d := range healed {
		inv.log.Warn("one-time-use device in use was not reserved: healed into reserved", "address", d.Address, "consumer", d.ConsumerName)
		inv.emit(ctx, EventBurned, d)
	}
	return inv.List(ctx, Filter{})
}

func traits(d Device) []string {
	t := []string{}
	if d.OneTimeUse {
		t = append(t, TraitOneTimeUse)
	}
	return t
}

func same(a, b Device) bool {
	x, _ := encodeDevice(a)
	y, _ := encodeDevice(b)
	return string(x) == string(y)
}

func checkAddress(addr string) error {
	if !model.IsPCIAddress(addr) {
		return &model.SpecError{Errors: []model.FieldError{{Field: "address", Value: addr, Rule: "is not a PCI address dddd:bb:ss.f (lower-case hex)"}}, Of: "device"}
	}
	return nil
}

// Show returns one device of this host.
func (inv *Inventory) Show(ctx context.Context, addr string) (Device, error) {
	if err := checkAddress(addr); err != nil {
		return Device{}, err
	}
	cur, err := inv.load(ctx, inv.group)
	if err != nil {
		return Device{}, err
	}
	for _, e := range cur {
		if e.dev.Address == addr {
			return e.dev, nil
		}
	}
	return Device{}, fmt.Errorf("device %s of host %s: %w", addr, inv.host, store.ErrNotFound)
}

// Filter selects devices in List.
type Filter struct {
	NeedsCleaning bool
	// Trait is one of Traits (empty: any).
	Trait    string
	AllHosts bool
}

// Traits returns the traits vmeta sets on devices: the only ones a
// device list can be filtered by.
func Traits() []string { return []string{TraitOneTimeUse} }

// checkTrait refuses a trait vmeta never sets (Nova's tentative
// HW_ONE_TIME_USE, a typo): filtering by it would silently list nothing.
func checkTrait(t string) error {
	known := Traits()
	if t == "" || slices.Contains(known, t) {
		return nil
	}
	return &model.SpecError{Errors: []model.FieldError{{Field: "trait", Value: t,
		Rule: "unknown trait: vmeta sets only " + strings.Join(known, ", ")}}, Of: "device list request"}
}

// List returns the devices of this host (of every host with AllHosts),
// sorted by host and address. A trait vmeta never sets is refused.
func (inv *Inventory) List(ctx context.Context, f Filter) ([]Device, error) {
	if err := checkTrait(f.Trait); err != nil {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	groups := []string{inv.group}
	if f.AllHosts {
		recs, err := inv.st.Records(ctx, hostIndexPrefix)
		if err != nil {
			return nil, fmt.Errorf("list devices: %w", err)
		}
		groups = groups[:0]
		for _, r := range recs {
			groups = append(groups, "device/"+strings.TrimPrefix(r.Key, hostIndexPrefix))
		}
	}
	out := []Device{}
	for _, g := range groups {
		cur, err := inv.load(ctx, g)
		if err != nil {
			return nil, err
		}
		for _, e := range cur {
			if f.NeedsCleaning && !e.dev.NeedsCleaning {
				continue
			}
			if f.Trait != "" && !slices.Contains(e.dev.Traits, f.Trait) {
				continue
			}
			out = append(out, e.dev)
		}
	}
	return out, nil
}

func (inv *Inventory) emit(ctx context.Context, typ string, d Device) {
	if inv.events == nil {
		return
	}
	// The event outlives a canceled request: the change is committed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := inv.events.Emit(ctx, Stream, typ, toV1(d)); err != nil {
		inv.log.Error("device event not recorded", "type", typ, "address", d.Address, "err", err)
	}
}

// recordHook writes a cleanup hook's outcome into the device's record and
// the event stream.
func (inv *Inventory) recordHook(d Device, res HookResult) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	level := slog.LevelInfo
	if res.Outcome != HookOK {
		level = slog.LevelError
	}
	inv.log.Log(ctx, level, "cleanup hook ended", "address", d.Address, "outcome", res.Outcome, "message", res.Message)
	err := inv.retry(ctx, "record hook result", func() error {
		cur, err := inv.load(ctx, inv.group)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(cur, func(e entry) bool { return e.dev.Address == d.Address })
		if i < 0 {
			return nil
		}
		nd := cur[i].dev
		nd.LastCleanupHook = &res
		d = nd
		_, err = inv.commit(ctx, []store.GroupOp{putOp(nd, cur[i].version)}, []Device{nd})
		return err
	})
	if err != nil {
		inv.log.Error("cleanup hook result not recorded", "address", d.Address, "err", err)
	}
	inv.emit(ctx, EventHook, d)
}
