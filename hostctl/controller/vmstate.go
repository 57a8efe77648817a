package controller

// Instance states hostctl keeps itself, besides its libvirt domain's
// (issue: ephemeral storage encryption, item 8): an instance shelved
// (hostctl/ops: shelve.go) or rescued (rescue.go). Each is one store record per
// instance UUID (instance-vmstate/<uuid>), so the state holds across
// daemon restarts and every host sees it. While an instance has one:
//
//   - `hostctl instance show|list` shows it as the instance's state
//     (StateShelved, StateRescue);
//   - start, stop, reboot, apply, resize, rebuild, snapshot and hot-plug
//     are refused (ErrState, 409, naming the state);
//   - the reconciler leaves the instance alone: a shelved instance has no
//     domain and is not "missing", a rescued one runs another definition
//     that is not "repaired" back;
//   - its block-device records and key-manager secrets stay, so the
//     secrets sweep counts them in use.
//
// Delete removes the record (and a shelved instance's image).

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

// States of an instance kept by hostctl (Instance.State).
const (
	// StateShelved: the instance's root disk is an image of the catalog,
	// its domain and disk files are gone (Nova's SHELVED_OFFLOADED).
	StateShelved = "shelved_offloaded"
	// StateRescue: the domain boots a rescue disk, the instance's root
	// disk attached as its second disk (Nova's RESCUED).
	StateRescue = "rescue"
)

const vmStatePrefix = "instance-vmstate/"

func vmStateKey(uuid string) string { return vmStatePrefix + strings.ToLower(uuid) }

// vmState is the record of a shelved or rescued instance.
type vmState struct {
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

// vmStateOf returns the instance's state record (State "" when it has
// none) and the record's version.
func (c *Controller) vmStateOf(ctx context.Context, uuid string) (vmState, int64, error) {
	if c.records == nil || uuid == "" {
		return vmState{}, 0, nil
	}
	sr, err := c.records.Record(ctx, vmStateKey(uuid))
	if errors.Is(err, store.ErrNotFound) {
		return vmState{}, 0, nil
	}
	if err != nil {
		return vmState{}, 0, fmt.Errorf("state of instance %s: %w", uuid, err)
	}
	var st vmState
	if err := json.Unmarshal(sr.Value, &st); err != nil {
		return vmState{}, 0, fmt.Errorf("state of instance %s: %w", uuid, err)
	}
	return st, sr.Version, nil
}

// vmStates returns the state of every instance that has one, by UUID.
func (c *Controller) vmStates(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	if c.records == nil {
		return out, nil
	}
	recs, err := c.records.Records(ctx, vmStatePrefix)
	if err != nil {
		return nil, fmt.Errorf("instance states: %w", err)
	}
	for _, sr := range recs {
		var st vmState
		if json.Unmarshal(sr.Value, &st) == nil {
			out[strings.TrimPrefix(sr.Key, vmStatePrefix)] = st.State
		}
	}
	return out, nil
}

// putVMState stores st as the instance's state (a new record: the
// instance has none) and registers its removal on r.
func (c *Controller) putVMState(ctx context.Context, r *revert.Reverter, uuid string, st vmState) error {
	if c.records == nil {
		return errNoRecords
	}
	st.Host, st.Since = c.hostName, time.Now().UTC().Truncate(time.Second)
	val, err := json.Marshal(st)
	if err != nil {
		return err
	}
	key := vmStateKey(uuid)
	put, err := c.records.PutRecord(ctx, key, val, 0)
	if err != nil {
		return fmt.Errorf("state of instance %s: %w", st.Instance, err)
	}
	r.Add("remove the state record of "+st.Instance, func(ctx context.Context) error {
		return c.records.DeleteRecord(ctx, key, put.Version)
	})
	return nil
}

// dropVMState removes the instance's state record (version ver) and
// registers putting it back on r (nil after a commit).
func (c *Controller) dropVMState(ctx context.Context, r *revert.Reverter, uuid string, st vmState, ver int64) error {
	key := vmStateKey(uuid)
	if err := c.records.DeleteRecord(ctx, key, ver); err != nil {
		return fmt.Errorf("state of instance %s: %w", st.Instance, err)
	}
	if r != nil {
		val, err := json.Marshal(st)
		if err != nil {
			return err
		}
		r.Add("put back the state record of "+st.Instance, func(ctx context.Context) error {
			_, err := c.records.PutRecord(ctx, key, val, 0)
			return err
		})
	}
	return nil
}

// refuseVMState refuses op on a shelved or rescued instance (ErrState,
// naming the state and the way out).
func (c *Controller) refuseVMState(ctx context.Context, op string, rec store.Instance) error {
	st, _, err := c.vmStateOf(ctx, rec.UUID)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, rec.Name, err)
	}
	switch st.State {
	case "":
		return nil
	case StateShelved:
		return fmt.Errorf("%s %s: %w: the instance is %s (hostctl instance unshelve %s first)", op, rec.Name, ErrState, st.State, rec.Name)
	case StateRescue:
		return fmt.Errorf("%s %s: %w: the instance is in %s (hostctl instance unrescue %s first)", op, rec.Name, ErrState, st.State, rec.Name)
	default:
		return fmt.Errorf("%s %s: %w: the instance is %s", op, rec.Name, ErrState, st.State)
	}
}

// forgetVMState removes, after the instance is deleted, its state record
// and a shelved instance's image (failures are logged).
func (c *Controller) forgetVMState(ctx context.Context, name, uuid string) {
	st, ver, err := c.vmStateOf(ctx, uuid)
	if err != nil || st.State == "" {
		if err != nil {
			c.log.Warn("state record of a deleted instance not read", "name", name, "err", err)
		}
		return
	}
	if st.ShelvedImage != "" {
		if err := c.imageDir.Delete(ctx, st.ShelvedImage, nil); err != nil && !errors.Is(err, store.ErrNotFound) {
			c.log.Warn("shelved image of a deleted instance not deleted", "name", name, "image", st.ShelvedImage, "err", err)
		} else {
			c.emit(ctx, StreamImages, "image.deleted", map[string]string{"name": st.ShelvedImage})
		}
	}
	if err := c.dropVMState(ctx, nil, uuid, st, ver); err != nil && !errors.Is(err, store.ErrNotFound) {
		c.log.Warn("state record of a deleted instance not removed", "name", name, "err", err)
	}
}

// shelvedUsing names the shelved instances whose root disk is image name
// and the rescued instances whose rescue disk is over it (the image
// cannot be deleted meanwhile).
func (c *Controller) shelvedUsing(ctx context.Context, name string) ([]string, error) {
	if c.records == nil {
		return nil, nil
	}
	recs, err := c.records.Records(ctx, vmStatePrefix)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sr := range recs {
		var st vmState
		switch {
		case json.Unmarshal(sr.Value, &st) != nil:
		case st.ShelvedImage == name:
			out = append(out, st.Instance+" (shelved)")
		case st.RescueImage == name:
			out = append(out, st.Instance+" (rescue)")
		}
	}
	return out, nil
}

// adoptState is what Adopt does about a shelved or rescued instance,
// checked before the record changes hands: a shelved instance's root disk
// is an image of its old host's catalog, so it is adopted only when this
// host's catalog has that image (imported here first); a rescue ran on
// the old host's libvirt, so the adopted instance leaves it (its spec
// defines the domain here, as for any adopted instance). It returns what
// to do once the record is this host's: drop a rescue's state record.
func (c *Controller) adoptState(ctx context.Context, rec store.Instance) (after func() error, _ error) {
	st, ver, err := c.vmStateOf(ctx, rec.UUID)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", rec.Name, err)
	}
	switch st.State {
	case StateShelved:
		img, err := c.imageOf(ctx, st.ShelvedImage)
		switch {
		case err == nil && img == nil:
			return nil, fmt.Errorf("adopt %s: %w: the instance is %s and its root disk is image %s of host %s's catalog, which this host does not have: import it here (hostctl image import %s) first",
				rec.Name, ErrState, st.State, st.ShelvedImage, rec.Host, st.ShelvedImage)
		case err != nil:
			return nil, fmt.Errorf("adopt %s: shelved image %s: %w", rec.Name, st.ShelvedImage, err)
		}
		return func() error { return nil }, nil
	case StateRescue:
		return func() error {
			if err := c.dropVMState(ctx, nil, rec.UUID, st, ver); err != nil {
				return fmt.Errorf("adopt %s: adopted, but the rescue it was in on host %s is still recorded: %w", rec.Name, rec.Host, err)
			}
			c.log.Info("adopted instance leaves the rescue it was in on its old host", "name", rec.Name, "from", rec.Host, "rescue_image", st.RescueImage)
			return nil
		}, nil
	}
	return func() error { return nil }, nil
}

// forceForgetState removes the state record of an instance deleted from
// the store by force and says what stays on its dead host: a shelved
// instance's image in that host's catalog, a rescue's domain.
func (c *Controller) forceForgetState(ctx context.Context, rec store.Instance) []string {
	st, ver, err := c.vmStateOf(ctx, rec.UUID)
	if err != nil {
		return []string{fmt.Sprintf("the state record of %s (not read: %v)", rec.Name, err)}
	}
	var left []string
	switch st.State {
	case "":
		return nil
	case StateShelved:
		left = append(left, fmt.Sprintf("the shelved image %s in host %s's image catalog (delete it there: hostctl image delete %s)", st.ShelvedImage, rec.Host, st.ShelvedImage))
	case StateRescue:
		left = append(left, fmt.Sprintf("the rescue domain of %s and its rescue disk on host %s", rec.Name, rec.Host))
	}
	if err := c.dropVMState(ctx, nil, rec.UUID, st, ver); err != nil && !errors.Is(err, store.ErrNotFound) {
		left = append(left, fmt.Sprintf("the state record of %s (%v)", rec.Name, err))
	}
	return left
}
