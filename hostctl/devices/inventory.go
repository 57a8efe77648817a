package devices

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Stream is the event stream of device events.
const Stream = "devices"

// Event types on Stream; each carries the device record (types.Device).
const (
	EventBurned   = "device.burned"   // a one-time-use device was claimed (or healed) into reserved
	EventReleased = "device.released" // a burned device was released: it needs cleaning
	EventCleaned  = "device.cleaned"  // an operator said it is clean: back in the pool
	EventHook     = "device.cleanup_hook"
)

// ErrUnavailable is wrapped (with store.ErrConflict) when no device of an
// alias is free.
var ErrUnavailable = errors.New("no device available")

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
	dev     types.Device
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
		var d types.Device
		if err := json.Unmarshal(r.Value, &d); err != nil {
			return nil, fmt.Errorf("device inventory: record %s of %s: %w", r.Key, group, err)
		}
		d.Generation = r.Version
		d.NeedsCleaning = needsCleaning(d)
		out = append(out, entry{dev: d, version: r.Version})
	}
	return out, nil
}

func needsCleaning(d types.Device) bool {
	return d.OneTimeUse && d.Total > 0 && d.Reserved >= d.Total && d.Used == 0
}

func putOp(d types.Device, expect int64) store.GroupOp {
	d.NeedsCleaning = needsCleaning(d)
	d.Generation = 0 // the record's version is the generation
	body, _ := json.Marshal(d)
	return store.GroupOp{Key: keyPrefix + d.Address, Value: body, ExpectVersion: expect}
}

// commit writes ops and returns the devices as written (with their new
// generation).
func (inv *Inventory) commit(ctx context.Context, ops []store.GroupOp, devs []types.Device) ([]types.Device, error) {
	recs, err := inv.st.CommitGroup(ctx, inv.group, ops)
	if err != nil {
		return nil, err
	}
	out := make([]types.Device, len(devs))
	for i := range devs {
		out[i] = devs[i]
		out[i].Generation = recs[i].Version
		out[i].NeedsCleaning = needsCleaning(out[i])
	}
	return out, nil
}

// maxAttempts bounds the compare-and-swap retries of one change. A
// conflict means another writer changed one of the same records, which
// is progress for the inventory; a claim conflicts at most once per
// device another claimer took, so this is far above what a pool sees.
const maxAttempts = 1000

// retry runs fn until it does not conflict.
func (inv *Inventory) retry(ctx context.Context, what string, fn func() error) error {
	var err error
	for range maxAttempts {
		if err = fn(); !errors.Is(err, store.ErrConflict) || errors.Is(err, ErrUnavailable) || errors.Is(err, errRefused) {
			return err
		}
		inv.conflicts.Add(1)
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%s: %w (last conflict: %v)", what, cerr, err)
		}
	}
	return fmt.Errorf("%s: gave up after %d conflicting attempts: %w", what, maxAttempts, err)
}

// errRefused marks a conflict that retrying does not change (a device in
// use cannot be cleaned); refusal carries it.
var errRefused = errors.New("refused")

// refusal is a conflict (store.ErrConflict, so 409) that retrying does not
// change; its message is the whole story.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Is(target error) bool {
	return target == errRefused || target == store.ErrConflict
}

// Sync brings the inventory in line with the devices found and the spec:
// a record per matched device (created with total 1, reserved 0, used 0),
// alias, traits and flags updated, devices no longer found kept but not
// present (deleted when neither used nor reserved). It heals a
// one-time-use device that is in use but not reserved (marked one-time-use
// while allocated) into reserved = total. It never lowers reserved.
func (inv *Inventory) Sync(ctx context.Context, found []Found) ([]types.Device, error) {
	matched, err := inv.spec.Load().Match(found)
	if err != nil {
		return nil, err
	}
	if _, err := inv.st.PutRecord(ctx, hostIndexPrefix+inv.host, []byte(`{}`), -1); err != nil {
		return nil, fmt.Errorf("device inventory: index host %s: %w", inv.host, err)
	}
	var healed []types.Device
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
		var devs []types.Device
		healed = healed[:0]
		now := inv.now().UTC()
		seen := map[string]bool{}
		for _, m := range matched {
			seen[m.Address] = true
			e, exists := byAddr[m.Address]
			d := e.dev
			if !exists {
				d = types.Device{Address: m.Address, Host: inv.host, Total: 1}
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
			if e.dev.Present {
				d := e.dev
				d.Present = false
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

func traits(d types.Device) []string {
	t := []string{}
	if d.OneTimeUse {
		t = append(t, types.TraitOneTimeUse)
	}
	return t
}

func same(a, b types.Device) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// Claim gives consumer the devices its pci_aliases request. It is
// idempotent: devices the consumer already holds count (re-applying an
// instance, or rebuilding it, keeps its devices), and only the missing
// ones are claimed. Every device claimed, and every one-time-use device
// burned (reserved = total), is written in ONE compare-and-swap of the
// host's group, before the domain can run with it. It returns every
// device the consumer holds for reqs, by address, and the addresses
// claimed now (what a failed apply releases).
//
// Errors, each changing nothing: an alias no device_spec entry names
// (model.SpecError on pci_aliases[i].name), a count larger than the
// alias's pool (pci_aliases[i].count), and no free device (ErrUnavailable
// with store.ErrConflict, saying how many are burned and in use).
func (inv *Inventory) Claim(ctx context.Context, c Consumer, reqs []model.PCIAlias) (held []types.Device, claimed []string, err error) {
	if len(reqs) == 0 {
		return nil, nil, nil
	}
	aliases := inv.spec.Load().Aliases()
	var fe []model.FieldError
	for i, r := range reqs {
		if !aliases[r.Name] {
			fe = append(fe, model.FieldError{Field: fmt.Sprintf("pci_aliases[%d].name", i), Value: r.Name,
				Rule: fmt.Sprintf("unknown alias: no device_spec entry of host %s has it", inv.host)})
		}
	}
	if len(fe) > 0 {
		return nil, nil, &model.SpecError{Errors: fe}
	}
	var burned []types.Device
	err = inv.retry(ctx, "claim devices", func() error {
		cur, err := inv.load(ctx, inv.group)
		if err != nil {
			return err
		}
		held, claimed, burned = nil, nil, nil
		var ops []store.GroupOp
		var devs []types.Device
		now := inv.now().UTC()
		var fe []model.FieldError
		var unavailable []string
		for i, r := range reqs {
			var mine, free []entry
			pool, inUse, toClean, absent := 0, 0, 0, 0
			for _, e := range cur {
				d := e.dev
				if d.Alias != r.Name {
					continue
				}
				switch {
				case d.Consumer == c.UUID && d.Used > 0:
					mine = append(mine, e)
					pool++
				case !d.Present:
					absent++
				case d.Used > 0:
					inUse++
					pool++
				case d.Reserved >= d.Total:
					toClean++
					pool++
				default:
					free = append(free, e)
					pool++
				}
			}
			if r.Count > pool {
				note := ""
				if absent > 0 {
					note = fmt.Sprintf(" (%d more not present)", absent)
				}
				fe = append(fe, model.FieldError{Field: fmt.Sprintf("pci_aliases[%d].count", i), Value: r.Count,
					Rule: fmt.Sprintf("more than the %d %s of alias %s on host %s%s", pool, plural(pool, "device"), r.Name, inv.host, note)})
				continue
			}
			slices.SortFunc(mine, func(a, b entry) int { return strings.Compare(a.dev.Address, b.dev.Address) })
			for _, e := range mine[:min(len(mine), r.Count)] {
				held = append(held, e.dev)
			}
			need := r.Count - len(mine)
			if need <= 0 {
				continue
			}
			if need > len(free) {
				msg := fmt.Sprintf("alias %s: %d burned awaiting cleaning, %d in use", r.Name, toClean, inUse)
				if len(free) > 0 {
					msg += fmt.Sprintf(", %d free of %d needed", len(free), need)
				}
				if absent > 0 {
					msg += fmt.Sprintf(", %d not present", absent)
				}
				unavailable = append(unavailable, msg)
				continue
			}
			// A random pick spreads concurrent claimers over the pool.
			rand.Shuffle(len(free), func(a, b int) { free[a], free[b] = free[b], free[a] })
			for _, e := range free[:need] {
				d := e.dev
				d.Used, d.Consumer, d.ConsumerName = 1, c.UUID, c.Name
				if d.OneTimeUse {
					d.Reserved = d.Total
					d.BurnedAt = &now
					d.ReleasedAt, d.LastCleanupHook = nil, nil
				}
				ops = append(ops, putOp(d, e.version))
				devs = append(devs, d)
			}
		}
		if len(fe) > 0 {
			return &model.SpecError{Errors: fe}
		}
		if len(unavailable) > 0 {
			return fmt.Errorf("%w for %s: %s: %w", ErrUnavailable, c.Name, strings.Join(unavailable, "; "), store.ErrConflict)
		}
		if len(ops) == 0 {
			return nil
		}
		written, err := inv.commit(ctx, ops, devs)
		if err != nil {
			return err
		}
		for _, d := range written {
			held = append(held, d)
			claimed = append(claimed, d.Address)
			if d.OneTimeUse {
				burned = append(burned, d)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("claim devices for %s: %w", c.Name, err)
	}
	for _, d := range burned {
		inv.log.Info("one-time-use device claimed and burned", "address", d.Address, "alias", d.Alias, "instance", c.Name)
		inv.emit(ctx, EventBurned, d)
	}
	slices.SortFunc(held, func(a, b types.Device) int { return strings.Compare(a.Address, b.Address) })
	return held, claimed, nil
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// Release gives back the devices consumer holds (only those in addrs when
// addrs is not nil): used = 0, consumer cleared. Reserved is never
// touched, so a burned device stays out of the pool and now needs
// cleaning: that emits EventReleased and runs the cleanup hook.
func (inv *Inventory) Release(ctx context.Context, consumerUUID string, addrs []string) ([]types.Device, error) {
	var released []types.Device
	err := inv.retry(ctx, "release devices", func() error {
		cur, err := inv.load(ctx, inv.group)
		if err != nil {
			return err
		}
		var ops []store.GroupOp
		var devs []types.Device
		now := inv.now().UTC()
		for _, e := range cur {
			d := e.dev
			if d.Consumer != consumerUUID || d.Used == 0 || (addrs != nil && !slices.Contains(addrs, d.Address)) {
				continue
			}
			d.Used, d.Consumer = 0, ""
			if d.Reserved >= d.Total {
				d.ReleasedAt = &now
			}
			ops = append(ops, putOp(d, e.version))
			devs = append(devs, d)
		}
		if len(ops) == 0 {
			released = nil
			return nil
		}
		released, err = inv.commit(ctx, ops, devs)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("release devices of %s: %w", consumerUUID, err)
	}
	for _, d := range released {
		inv.log.Info("device released", "address", d.Address, "instance", d.ConsumerName, "needs_cleaning", d.NeedsCleaning)
		if d.Reserved >= d.Total {
			inv.emit(ctx, EventReleased, d)
			if inv.hook != nil {
				inv.hook.Run(d)
			}
		}
	}
	return released, nil
}

// ReleaseOrphans releases every device held by a consumer that live says
// is not an instance of this host (an apply that died between the claim
// and its store write, or an instance deleted while hostctl was down). Run
// it at start, before instances are applied.
func (inv *Inventory) ReleaseOrphans(ctx context.Context, live func(uuid string) bool) ([]types.Device, error) {
	cur, err := inv.load(ctx, inv.group)
	if err != nil {
		return nil, err
	}
	var out []types.Device
	done := map[string]bool{}
	for _, e := range cur {
		c := e.dev.Consumer
		if e.dev.Used == 0 || c == "" || done[c] || live(c) {
			continue
		}
		done[c] = true
		inv.log.Warn("device held by an instance this host does not have: releasing it", "address", e.dev.Address, "consumer", c, "consumer_name", e.dev.ConsumerName)
		rel, err := inv.Release(ctx, c, nil)
		if err != nil {
			return out, err
		}
		out = append(out, rel...)
	}
	return out, nil
}

// Held returns the devices consumer holds.
func (inv *Inventory) Held(ctx context.Context, consumerUUID string) ([]types.Device, error) {
	cur, err := inv.load(ctx, inv.group)
	if err != nil {
		return nil, err
	}
	var out []types.Device
	for _, e := range cur {
		if e.dev.Consumer == consumerUUID && e.dev.Used > 0 {
			out = append(out, e.dev)
		}
	}
	return out, nil
}

// Managed reports whether addr is a device of this host's inventory (an
// instance may then get it only through pci_aliases), and its alias.
func (inv *Inventory) Managed(ctx context.Context, addr string) (string, bool, error) {
	d, err := inv.Show(ctx, addr)
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return d.Alias, true, nil
}

// Clean is the operator saying the device is clean: reserved back to 0,
// so it rejoins the pool. Refused while the device is in use.
func (inv *Inventory) Clean(ctx context.Context, addr string) (types.Device, error) {
	if err := checkAddress(addr); err != nil {
		return types.Device{}, err
	}
	var out types.Device
	var changed bool
	err := inv.retry(ctx, "clean device", func() error {
		cur, err := inv.load(ctx, inv.group)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(cur, func(e entry) bool { return e.dev.Address == addr })
		if i < 0 {
			return fmt.Errorf("device %s of host %s: %w", addr, inv.host, store.ErrNotFound)
		}
		d := cur[i].dev
		if d.Used > 0 {
			return &refusal{fmt.Sprintf("device %s is in use by instance %s (%s): it can be cleaned once the instance is deleted",
				addr, d.ConsumerName, d.Consumer)}
		}
		changed = d.Reserved != 0
		if !changed {
			out = d
			return nil
		}
		now := inv.now().UTC()
		d.Reserved, d.CleanedAt = 0, &now
		w, err := inv.commit(ctx, []store.GroupOp{putOp(d, cur[i].version)}, []types.Device{d})
		if err != nil {
			return err
		}
		out = w[0]
		return nil
	})
	if err != nil {
		return types.Device{}, fmt.Errorf("clean: %w", err)
	}
	if changed {
		inv.log.Info("device cleaned by the operator: back in the pool", "address", addr)
		inv.emit(ctx, EventCleaned, out)
	}
	return out, nil
}

func checkAddress(addr string) error {
	if !model.IsPCIAddress(addr) {
		return &model.SpecError{Errors: []model.FieldError{{Field: "address", Value: addr, Rule: "is not a PCI address dddd:bb:ss.f (lower-case hex)"}}}
	}
	return nil
}

// Show returns one device of this host.
func (inv *Inventory) Show(ctx context.Context, addr string) (types.Device, error) {
	if err := checkAddress(addr); err != nil {
		return types.Device{}, err
	}
	cur, err := inv.load(ctx, inv.group)
	if err != nil {
		return types.Device{}, err
	}
	for _, e := range cur {
		if e.dev.Address == addr {
			return e.dev, nil
		}
	}
	return types.Device{}, fmt.Errorf("device %s of host %s: %w", addr, inv.host, store.ErrNotFound)
}

// Filter selects devices in List.
type Filter struct {
	NeedsCleaning bool
	Trait         string
	AllHosts      bool
}

// List returns the devices of this host (of every host with AllHosts),
// sorted by host and address.
func (inv *Inventory) List(ctx context.Context, f Filter) ([]types.Device, error) {
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
	out := []types.Device{}
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

func (inv *Inventory) emit(ctx context.Context, typ string, d types.Device) {
	if inv.events == nil {
		return
	}
	// The event outlives a canceled request: the change is committed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := inv.events.Emit(ctx, Stream, typ, d); err != nil {
		inv.log.Error("device event not recorded", "type", typ, "address", d.Address, "err", err)
	}
}

// recordHook writes a cleanup hook's outcome into the device's record and
// the event stream.
func (inv *Inventory) recordHook(d types.Device, res types.HookResult) {
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
		_, err = inv.commit(ctx, []store.GroupOp{putOp(nd, cur[i].version)}, []types.Device{nd})
		return err
	})
	if err != nil {
		inv.log.Error("cleanup hook result not recorded", "address", d.Address, "err", err)
	}
	inv.emit(ctx, EventHook, d)
}

// ListDevices is List for the admin API (api.DeviceService).
func (inv *Inventory) ListDevices(ctx context.Context, needsCleaning bool, trait string, allHosts bool) ([]types.Device, error) {
	return inv.List(ctx, Filter{NeedsCleaning: needsCleaning, Trait: trait, AllHosts: allHosts})
}

// ClaimFor is Claim for the controller (controller.Devices): the devices
// as pci_devices entries of the instance spec.
func (inv *Inventory) ClaimFor(ctx context.Context, uuid, name string, reqs []model.PCIAlias) ([]model.PCIDevice, []string, error) {
	held, claimed, err := inv.Claim(ctx, Consumer{UUID: uuid, Name: name}, reqs)
	if err != nil {
		return nil, nil, err
	}
	out := make([]model.PCIDevice, len(held))
	for i, d := range held {
		out[i] = model.PCIDevice{Address: d.Address, OneTimeUse: d.OneTimeUse, Alias: d.Alias}
	}
	return out, claimed, nil
}

// ReleaseFor is Release for the controller.
func (inv *Inventory) ReleaseFor(ctx context.Context, uuid string, addrs []string) error {
	_, err := inv.Release(ctx, uuid, addrs)
	return err
}

// HeldBy lists the addresses of the devices consumer holds.
func (inv *Inventory) HeldBy(ctx context.Context, uuid string) ([]string, error) {
	held, err := inv.Held(ctx, uuid)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(held))
	for i, d := range held {
		out[i] = d.Address
	}
	return out, nil
}
