package nics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// The NICs' MAC addresses and the instance's addresses are unique across
// every host sharing the store (two guests with one MAC break each
// other's networking; an address identifies one guest to the metadata
// service).
//
// A MAC address is claimed by a record of its own ("nic-mac/<mac>",
// holding the instance's UUID and name), created with a compare-and-swap
// (expected version 0: must not exist): of two applies of different
// instances with one MAC, on one host or two, exactly one creates the
// record; the other reads it and is refused (409, naming the field, the
// MAC and the holder). The claim is the store's, not a host's: an adopted
// instance's apply on its new host carries it (same UUID). An apply or a
// NIC hot-plug claims before anything changes; the operation's failure
// gives back what it claimed, its success releases the MACs the instance
// no longer has (a changed MAC, a detached NIC); the instance's delete
// (or a force-delete from the store) releases the rest once its record is
// gone. Instances stored before the claims existed hold none: a MAC newly
// claimed is also looked for in the other instances' stored specs, and
// their next apply claims theirs.
//
// A new instance's claims are pending until its apply stands (its record
// written): a pending claim whose holder has no record is an apply under
// way (refused, saying so), unless the holder has the name of the
// instance applied now (an earlier attempt of it that died). A claim that
// is not pending, whose holder has no record any more, outlived its
// instance (the release after its delete failed): it is taken over.

// Store is the store as the claims and the address check use it.
type Store interface {
	Record(ctx context.Context, key string) (store.Record, error)
	PutRecord(ctx context.Context, key string, value []byte, expectVersion int64) (store.Record, error)
	DeleteRecord(ctx context.Context, key string, expectVersion int64) error
	Records(ctx context.Context, prefix string) ([]store.Record, error)
	Instances(ctx context.Context) ([]store.Instance, error)
	LookupAddress(ctx context.Context, addr string) (string, error)
}

// macPrefix starts the key of every MAC claim record.
const macPrefix = "nic-mac/"

// undoTimeout bounds a give-back or a release run after its request's
// context may have ended.
const undoTimeout = 30 * time.Second

func macKey(mac string) string { return macPrefix + strings.ToLower(mac) }

// Holder is the instance a MAC claim record names.
type Holder struct {
	UUID string
	Name string
	// Pending: the instance's first apply is under way (no record yet).
	Pending bool
}

// holderV1 is the stored format of a MAC claim record (macPrefix + the
// MAC in lower case).
type holderV1 struct {
	UUID    string `json:"uuid"`
	Name    string `json:"name"`
	Pending bool   `json:"pending,omitempty"`
}

func encodeHolder(h Holder) ([]byte, error) { return json.Marshal(holderV1(h)) }

func decodeHolder(b []byte) (Holder, error) {
	var s holderV1
	if err := json.Unmarshal(b, &s); err != nil {
		return Holder{}, err
	}
	if s.UUID == "" {
		return Holder{}, errors.New("no uuid")
	}
	return Holder(s), nil
}

// heldError is a MAC another instance holds.
type heldError struct {
	op, name string
	field    string
	mac      string
	holder   string
	// unstored: the holder has no instance record (its first apply is
	// under way, or the claim outlived it).
	unstored bool
}

func (e *heldError) Error() string {
	s := fmt.Sprintf("%s %s: %v: %s: %q is already the MAC address of instance %s (a MAC address names one NIC)", e.op, e.name, store.ErrConflict, e.field, e.mac, e.holder)
	if e.unstored {
		s += fmt.Sprintf("; instance %s has no record: its first apply is under way, or the claim record %s outlived it", e.holder, macKey(e.mac))
	}
	return s
}

func (e *heldError) Unwrap() error { return store.ErrConflict }

// claimed is a claim record a call wrote (what its failure gives back,
// its success commits when pending).
type claimed struct {
	mac     string
	version int64
	pending bool
}

// ClaimMACs claims the MAC address of every NIC of in for it (in.UUID),
// for op ("apply", "attach NIC to"), before op changes anything: a MAC
// another instance holds, by its claim or (an instance stored before the
// claims) its stored spec, is refused and nothing stays claimed. end
// takes op's outcome: an error gives back what this call claimed; nil
// releases the MACs old (the spec before op; nil for a new instance) has
// and in no longer has. Without a store it claims nothing.
func (p *Part) ClaimMACs(ctx context.Context, op string, in, old *model.Instance) (end func(context.Context, error), err error) {
	nop := func(context.Context, error) {}
	if p.st == nil {
		return nop, nil
	}
	if in.UUID == "" && len(in.NICs) > 0 {
		return nil, fmt.Errorf("%s %s: claim MAC addresses: the instance has no UUID yet", op, in.Name)
	}
	var got []claimed
	for i, n := range in.NICs {
		if n.MAC == "" {
			continue
		}
		c, err := p.claimMAC(ctx, op, in, i, old == nil)
		if err != nil {
			p.giveBack(ctx, in, got)
			return nil, err
		}
		if c != nil {
			got = append(got, *c)
		}
	}
	if err := p.checkUnclaimed(ctx, op, in, got); err != nil {
		p.giveBack(ctx, in, got)
		return nil, err
	}
	return func(ctx context.Context, opErr error) {
		if opErr != nil {
			p.giveBack(ctx, in, got)
			return
		}
		p.commit(ctx, in, got)
		if old != nil {
			p.releaseMACs(ctx, old.UUID, old.Name, dropped(old, in))
		}
	}, nil
}

// claimMAC claims the MAC of in.NICs[i] (pending: in has no record
// yet); it returns the record it wrote (nil when in holds it already).
func (p *Part) claimMAC(ctx context.Context, op string, in *model.Instance, i int, pending bool) (*claimed, error) {
	mac := strings.ToLower(in.NICs[i].MAC)
	var created bool
	var holder Holder
	rec, err := store.Update(ctx, p.st, macKey(mac), func(old store.Record, exists bool) ([]byte, error) {
		created = false
		if exists {
			h, err := decodeHolder(old.Value)
			if err != nil {
				return nil, fmt.Errorf("%s %s: MAC claim record %s: %w", op, in.Name, old.Key, err)
			}
			if h.UUID == in.UUID {
				return nil, nil // carried
			}
			holder = h
			if (!h.Pending || h.Name == in.Name) && !p.stored(ctx, h.UUID) {
				p.log().Warn("a MAC address claim outlived its instance: taken over", "mac", mac, "holder", h.Name, "holder_uuid", h.UUID, "instance", in.Name)
			} else {
				return nil, &heldError{op: op, name: in.Name, field: fmt.Sprintf("nics[%d].mac", i), mac: in.NICs[i].MAC, holder: h.Name}
			}
		}
		created = true
		return encodeHolder(Holder{UUID: in.UUID, Name: in.Name, Pending: pending})
	})
	if err != nil {
		if he, held := errors.AsType[*heldError](err); held {
			he.unstored = !p.stored(ctx, holder.UUID)
			return nil, err
		}
		return nil, fmt.Errorf("%s %s: claim MAC address %s: %w", op, in.Name, mac, err)
	}
	if !created {
		return nil, nil
	}
	return &claimed{mac: mac, version: rec.Version, pending: pending}, nil
}

// commit ends the pending claims of in's apply that stands (its record
// written). A claim that went meanwhile (another instance took it over as
// outlived, or its give-back raced a retry) is written again; one another
// instance holds by now is logged: two instances have the MAC.
func (p *Part) commit(ctx context.Context, in *model.Instance, got []claimed) {
	for _, c := range got {
		if !c.pending {
			continue
		}
		_, err := store.Update(ctx, p.st, macKey(c.mac), func(old store.Record, exists bool) ([]byte, error) {
			if exists {
				h, err := decodeHolder(old.Value)
				if err != nil {
					return nil, err
				}
				if h.UUID != in.UUID {
					return nil, fmt.Errorf("%w: instance %s holds it by now", store.ErrConflict, h.Name)
				}
				if !h.Pending {
					return nil, nil
				}
			}
			return encodeHolder(Holder{UUID: in.UUID, Name: in.Name})
		})
		if err != nil {
			p.log().Error("commit the claim of a MAC address", "instance", in.Name, "mac", c.mac, "err", err)
		}
	}
}

// stored reports whether an instance of uuid has a record (true when the
// store cannot tell).
func (p *Part) stored(ctx context.Context, uuid string) bool {
	recs, err := p.st.Instances(ctx)
	if err != nil {
		return true
	}
	return slices.ContainsFunc(recs, func(r store.Instance) bool { return r.UUID == uuid })
}

// checkUnclaimed refuses a MAC just claimed that an instance stored
// before the claims existed has in its stored spec (it holds no claim).
func (p *Part) checkUnclaimed(ctx context.Context, op string, in *model.Instance, got []claimed) error {
	if len(got) == 0 {
		return nil
	}
	mine := make(map[string]int, len(in.NICs))
	for i, n := range in.NICs {
		mine[strings.ToLower(n.MAC)] = i
	}
	fresh := make(map[string]bool, len(got))
	for _, c := range got {
		fresh[c.mac] = true
	}
	recs, err := p.st.Instances(ctx)
	if err != nil {
		return fmt.Errorf("%s %s: check MAC addresses: %w", op, in.Name, err)
	}
	for _, rec := range recs {
		if rec.Name == in.Name || (in.UUID != "" && rec.UUID == in.UUID) {
			continue
		}
		var other struct {
			NICs []struct {
				MAC string `json:"mac"`
			} `json:"nics"`
		}
		if err := json.Unmarshal(rec.Spec, &other); err != nil {
			return fmt.Errorf("%s %s: check MAC addresses: instance %s: decode stored spec: %w", op, in.Name, rec.Name, err)
		}
		for _, n := range other.NICs {
			mac := strings.ToLower(n.MAC)
			if fresh[mac] {
				i := mine[mac]
				return &heldError{op: op, name: in.Name, field: fmt.Sprintf("nics[%d].mac", i), mac: in.NICs[i].MAC, holder: rec.Name}
			}
		}
	}
	return nil
}

// giveBack deletes the claim records a failed operation created (each
// only as it created it).
func (p *Part) giveBack(ctx context.Context, in *model.Instance, got []claimed) {
	if len(got) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	for _, c := range got {
		if err := p.st.DeleteRecord(ctx, macKey(c.mac), c.version); err != nil && !errors.Is(err, store.ErrNotFound) {
			p.log().Error("give back the MAC address a failed operation claimed", "instance", in.Name, "mac", c.mac, "err", err)
		}
	}
}

// releaseMACs deletes the claims of macs that instance uuid holds (a
// claim another instance holds by now stays).
func (p *Part) releaseMACs(ctx context.Context, uuid, name string, macs []string) {
	if p.st == nil || len(macs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	for _, mac := range macs {
		if err := p.releaseMAC(ctx, uuid, mac); err != nil {
			p.log().Error("release a MAC address claim", "instance", name, "mac", mac, "err", err)
		}
	}
}

func (p *Part) releaseMAC(ctx context.Context, uuid, mac string) error {
	key := macKey(mac)
	return store.RetryConflicts(ctx, "release "+key, func() error {
		rec, err := p.st.Record(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		h, err := decodeHolder(rec.Value)
		if err != nil {
			return store.Final(fmt.Errorf("MAC claim record %s: %w", key, err))
		}
		if h.UUID != uuid {
			return nil
		}
		err = p.st.DeleteRecord(ctx, key, rec.Version)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
}

// claimAdded claims the MACs in has and old has not that the operation
// did not claim before it changed the domain: a NIC the domain got
// outside hostctl, which the reconciler's republish finds. One another
// instance holds is logged (the domain has the NIC already: refusing the
// republish would help nobody). What it claims goes back on r when the
// operation fails.
func (p *Part) claimAdded(ctx context.Context, r *revert.Reverter, old, in *model.Instance) error {
	if p.st == nil || old == nil || in.UUID == "" {
		return nil
	}
	had := map[string]bool{}
	for _, mac := range macsOf(old) {
		had[mac] = true
	}
	for i, n := range in.NICs {
		if n.MAC == "" || had[strings.ToLower(n.MAC)] {
			continue
		}
		c, err := p.claimMAC(ctx, "republish", in, i, false)
		if _, held := errors.AsType[*heldError](err); held {
			p.log().Warn("a NIC of the domain has a MAC address another instance holds", "instance", in.Name, "err", err)
			continue
		}
		if err != nil {
			return err
		}
		if c != nil {
			r.Add("give back the claim of MAC "+c.mac, func(ctx context.Context) error {
				return p.st.DeleteRecord(ctx, macKey(c.mac), c.version)
			})
		}
	}
	return nil
}

// heldBy lists the MACs whose claim names instance uuid (a NIC the
// domain lost outside hostctl keeps its claim until the instance goes).
func (p *Part) heldBy(ctx context.Context, uuid string) ([]string, error) {
	recs, err := p.st.Records(ctx, macPrefix)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range recs {
		if h, err := decodeHolder(r.Value); err == nil && h.UUID == uuid {
			out = append(out, strings.TrimPrefix(r.Key, macPrefix))
		}
	}
	return out, nil
}

// releaseAll releases every MAC claim of the deleted instance in.
func (p *Part) releaseAll(ctx context.Context, in *model.Instance) error {
	if p.st == nil || in.UUID == "" {
		return nil
	}
	macs := macsOf(in)
	held, err := p.heldBy(ctx, in.UUID)
	for _, mac := range held {
		if !slices.Contains(macs, mac) {
			macs = append(macs, mac)
		}
	}
	p.releaseMACs(ctx, in.UUID, in.Name, macs)
	if err != nil {
		return fmt.Errorf("list the MAC claims of %s: %w", in.Name, err)
	}
	return nil
}

// dropped lists the MACs old has and in has not.
func dropped(old, in *model.Instance) []string {
	now := map[string]bool{}
	for _, n := range in.NICs {
		now[strings.ToLower(n.MAC)] = true
	}
	var out []string
	for _, n := range old.NICs {
		if mac := strings.ToLower(n.MAC); mac != "" && !now[mac] {
			out = append(out, mac)
		}
	}
	return out
}

// macsOf lists in's MACs.
func macsOf(in *model.Instance) []string {
	var out []string
	for _, n := range in.NICs {
		if n.MAC != "" {
			out = append(out, strings.ToLower(n.MAC))
		}
	}
	return out
}

// checkAddresses refuses an address of in another instance has, naming
// the field (the store's Put refuses it too, atomically, but names no
// field).
func (p *Part) checkAddresses(ctx context.Context, in *model.Instance) error {
	for i, a := range in.Addresses {
		owner, err := p.st.LookupAddress(ctx, a)
		switch {
		case err == nil && owner != in.UUID:
			return fmt.Errorf("%w: addresses[%d]: %q is already the address of instance %s (an address identifies one guest)", store.ErrConflict, i, a, p.nameOf(ctx, owner))
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return err
		}
	}
	return nil
}

// nameOf names the instance of uuid (uuid when none is found).
func (p *Part) nameOf(ctx context.Context, uuid string) string {
	recs, err := p.st.Instances(ctx)
	if err != nil {
		return uuid
	}
	for _, r := range recs {
		if r.UUID == uuid {
			return r.Name
		}
	}
	return uuid
}
