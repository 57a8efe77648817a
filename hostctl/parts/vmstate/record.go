package vmstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// KeyPrefix is the prefix of the state records' keys
// (instance-vmstate/<lower-case uuid>).
const KeyPrefix = "instance-vmstate/"

func key(uuid string) string { return KeyPrefix + strings.ToLower(uuid) }

// ErrNoRecords is returned when the store keeps no records (no state can
// be kept).
var ErrNoRecords = errors.New("the store keeps no records (instance states need them)")

// Record is the stored state of a shelved or rescued instance.
type Record struct {
	Instance string    `json:"instance"`
	Host     string    `json:"host,omitempty"`
	State    string    `json:"state"`
	Since    time.Time `json:"since"`
	// ShelvedImage is the catalog image holding a shelved instance's
	// root disk.
	ShelvedImage string `json:"shelved_image,omitempty"`
	// RescueImage is the image the rescue disk was made from; Domain the
	// persistent definition before the rescue (restored by unrescue).
	RescueImage string `json:"rescue_image,omitempty"`
	Domain      []byte `json:"domain,omitempty"`
	// RescueSecret is the rescue image's key-manager secret an encrypted
	// rescue disk opens with (the image's own, no copy), and
	// RescueLibvirtSecret the libvirt secret made for it, undefined at
	// unrescue (hostctl/ops, rescue.go).
	RescueSecret        string `json:"rescue_secret,omitempty"`
	RescueLibvirtSecret string `json:"rescue_libvirt_secret,omitempty"`
}

// Of returns the instance's state record (State "" when it has none) and
// the record's version.
func (p *Part) Of(ctx context.Context, uuid string) (Record, int64, error) {
	if p.records == nil || uuid == "" {
		return Record{}, 0, nil
	}
	sr, err := p.records.Record(ctx, key(uuid))
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, 0, nil
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("state of instance %s: %w", uuid, err)
	}
	var st Record
	if err := json.Unmarshal(sr.Value, &st); err != nil {
		return Record{}, 0, fmt.Errorf("state of instance %s: %w", uuid, err)
	}
	return st, sr.Version, nil
}

// all returns every state record by lower-case instance UUID; strict
// refuses an unreadable one (else it is skipped).
func (p *Part) all(ctx context.Context, strict bool) (map[string]Record, error) {
	out := map[string]Record{}
	if p.records == nil {
		return out, nil
	}
	recs, err := p.records.Records(ctx, KeyPrefix)
	if err != nil {
		return nil, fmt.Errorf("instance states: %w", err)
	}
	for _, sr := range recs {
		var st Record
		if err := json.Unmarshal(sr.Value, &st); err != nil {
			if strict {
				return nil, fmt.Errorf("state record %s: %w", sr.Key, err)
			}
			continue
		}
		out[strings.TrimPrefix(sr.Key, KeyPrefix)] = st
	}
	return out, nil
}

// Put stores st as the instance's state (a new record: the instance has
// none) and registers its removal on r.
func (p *Part) Put(ctx context.Context, r *revert.Reverter, uuid string, st Record) error {
	if p.records == nil {
		return ErrNoRecords
	}
	st.Host, st.Since = p.host, time.Now().UTC().Truncate(time.Second)
	val, err := json.Marshal(st)
	if err != nil {
		return err
	}
	k := key(uuid)
	put, err := p.records.PutRecord(ctx, k, val, 0)
	if err != nil {
		return fmt.Errorf("state of instance %s: %w", st.Instance, err)
	}
	r.Add("remove the state record of "+st.Instance, func(ctx context.Context) error {
		return p.records.DeleteRecord(ctx, k, put.Version)
	})
	return nil
}

// Drop removes the instance's state record st (version ver) and
// registers putting it back on r (nil: nothing to undo).
func (p *Part) Drop(ctx context.Context, r *revert.Reverter, uuid string, st Record, ver int64) error {
	if p.records == nil {
		return ErrNoRecords
	}
	k := key(uuid)
	if err := p.records.DeleteRecord(ctx, k, ver); err != nil {
		return fmt.Errorf("state of instance %s: %w", st.Instance, err)
	}
	if r != nil {
		val, err := json.Marshal(st)
		if err != nil {
			return err
		}
		r.Add("put back the state record of "+st.Instance, func(ctx context.Context) error {
			_, err := p.records.PutRecord(ctx, k, val, 0)
			return err
		})
	}
	return nil
}

// Require returns the state record of instance name (uuid) and its
// version, refusing (part.ErrState, naming the state it is in) one whose
// state is not want (Shelved, Rescue).
func (p *Part) Require(ctx context.Context, name, uuid, want string) (Record, int64, error) {
	st, ver, err := p.Of(ctx, uuid)
	if err != nil {
		return Record{}, 0, err
	}
	if st.State != want {
		return Record{}, 0, p.notIn(ctx, name, uuid, want, st.State)
	}
	return st, ver, nil
}

// State returns the instance's state ("" for none).
func (p *Part) State(ctx context.Context, uuid string) (string, error) {
	st, _, err := p.Of(ctx, uuid)
	return st.State, err
}

// States returns the state of every instance that has one, by lower-case
// UUID.
func (p *Part) States(ctx context.Context) (map[string]string, error) {
	all, err := p.all(ctx, false)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(all))
	for uuid, st := range all {
		out[uuid] = st.State
	}
	return out, nil
}

// ImageUsers names the shelved instances whose root disk is image name
// and the rescued instances whose rescue disk is over it (the image
// cannot be deleted meanwhile).
func (p *Part) ImageUsers(ctx context.Context, name string) ([]string, error) {
	all, err := p.all(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, st := range all {
		switch {
		case st.ShelvedImage == name:
			out = append(out, st.Instance+" (shelved)")
		case st.RescueImage == name:
			out = append(out, st.Instance+" (rescue)")
		}
	}
	return out, nil
}

// Summary is what the secrets' rule reads of a state record (an alias
// of an unnamed struct type, declared identically as disks.State: the
// disks part imports nothing of this package, the daemon hands it this
// part).
type Summary = struct {
	Instance, State, ShelvedImage, RescueImage, RescueSecret string
}

// Summaries returns what the secrets' rule reads of every state record
// (a shelved instance's image goes with it, a rescue disk opens with the
// rescue image's secret), by lower-case instance UUID. An unreadable
// record is refused: a secret is not deleted on a guess.
func (p *Part) Summaries(ctx context.Context) (map[string]Summary, error) {
	all, err := p.all(ctx, true)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Summary, len(all))
	for uuid, st := range all {
		out[uuid] = Summary{Instance: st.Instance, State: st.State, ShelvedImage: st.ShelvedImage,
			RescueImage: st.RescueImage, RescueSecret: st.RescueSecret}
	}
	return out, nil
}
