package encryption

// LUKS key slots: passphrase rotation in place (qemu-img amend, QEMU ≥
// 5.1). A LUKS1 header has 8 key slots, each holding the master key
// wrapped under one passphrase; adding a slot with a new passphrase and
// erasing the old one changes the passphrase without re-encrypting any
// data. qemu-img amend needs the image unlocked and unshared: it fails on
// an image a running QEMU holds (offline only), and it refuses to erase
// the last active slot.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// MaxKeySlots is the number of key slots of a LUKS1 header.
const MaxKeySlots = 8

// Key slot errors.
var (
	// ErrSlotActive: the slot asked for already holds a passphrase
	// (qemu-img amend refuses to overwrite it).
	ErrSlotActive = errors.New("key slot is active")
	// ErrLastSlot: erasing the slot would leave no passphrase that opens
	// the disk (qemu-img amend refuses).
	ErrLastSlot = errors.New("refusing to erase the only active key slot")
	// ErrNoFreeSlot: every key slot is active.
	ErrNoFreeSlot = errors.New("no free key slot")
)

// KeySlots reads which key slots of the LUKS header of the image at path
// are active (index = slot number), with qemu-img info (no passphrase
// needed: the slot table is not secret).
func (t *Tool) KeySlots(ctx context.Context, path string) ([]bool, error) {
	out, err := exec.CommandContext(ctx, t.qemuImg, "info", "--output=json", "-U", path).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	return ParseKeySlots(out)
}

// ParseKeySlots reads the key slot table from `qemu-img info
// --output=json` of a LUKS qcow2 (or raw LUKS) image.
func ParseKeySlots(out []byte) ([]bool, error) {
	type slots struct {
		Slots []struct {
			Active bool `json:"active"`
		} `json:"slots"`
	}
	var raw struct {
		FormatSpecific struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"format-specific"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, fmt.Errorf("qemu-img info: %w", err)
	}
	var s slots
	switch raw.FormatSpecific.Type {
	case "qcow2":
		var d struct {
			Encrypt *slots `json:"encrypt"`
		}
		if err := json.Unmarshal(raw.FormatSpecific.Data, &d); err != nil {
			return nil, fmt.Errorf("qemu-img info: qcow2 data: %w", err)
		}
		if d.Encrypt == nil {
			return nil, errors.New("qemu-img info: the image is not encrypted")
		}
		s = *d.Encrypt
	case "luks":
		if err := json.Unmarshal(raw.FormatSpecific.Data, &s); err != nil {
			return nil, fmt.Errorf("qemu-img info: luks data: %w", err)
		}
	default:
		return nil, fmt.Errorf("qemu-img info: format %q has no LUKS key slots", raw.FormatSpecific.Type)
	}
	if len(s.Slots) == 0 || len(s.Slots) > MaxKeySlots {
		return nil, fmt.Errorf("qemu-img info: %d key slots, want 1 to %d", len(s.Slots), MaxKeySlots)
	}
	active := make([]bool, len(s.Slots))
	for i, sl := range s.Slots {
		active[i] = sl.Active
	}
	return active, nil
}

// FreeKeySlot returns the lowest inactive slot, or ErrNoFreeSlot.
func FreeKeySlot(active []bool) (int, error) {
	for i, a := range active {
		if !a {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d slots are active", ErrNoFreeSlot, len(active))
}

// amendArgs are the arguments of qemu-img amend on the LUKS qcow2 at
// path unlocked with the first secret (fd 3), its encrypted backing file
// (when hasBacking) with the second (fd 4), and the next free fd for an
// added secret.
func amendArgs(path string, hasBacking bool) (args []string, nextFD int) {
	var backing []byte
	if hasBacking {
		backing = []byte{}
	}
	return append([]string{"amend", "-q"}, openArgs(path, backing)...), 3 + len(secretsOf(nil, backing))
}

// AddKeySlot adds next as a passphrase of the LUKS qcow2 image at path,
// in key slot slot (which must be free: choose it with KeySlots and
// FreeKeySlot), unlocking the image with cur (and its encrypted backing
// file, if any, with backing; nil for none). All three reach qemu-img
// through pipes. An active slot is ErrSlotActive; a cur that does not
// unlock the image is ErrWrongPassphrase. The image must not be in use
// (a running QEMU holds a lock qemu-img amend needs).
func (t *Tool) AddKeySlot(ctx context.Context, path string, slot int, cur, next, backing []byte) error {
	if slot < 0 || slot >= MaxKeySlots {
		return fmt.Errorf("add key slot to %s: slot %d: must be 0 to %d", path, slot, MaxKeySlots-1)
	}
	args, fd := amendArgs(path, backing != nil)
	args = append(args, "--object", "secret,id=secnew,file=/dev/fd/"+strconv.Itoa(fd), "-o",
		"encrypt.state=active,encrypt.new-secret=secnew,encrypt.keyslot="+strconv.Itoa(slot)+t.iterOpt())
	secrets := append(secretsOf(cur, backing), next)
	var err error
	for range createAttempts {
		if err = runWithSecrets(ctx, t.qemuImg, args, secrets...); err == nil || !strings.Contains(err.Error(), "Unable to get accurate CPU usage") {
			break
		}
	}
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "Refusing to overwrite active keyslot"):
		return fmt.Errorf("add key slot %d to %s: %w", slot, path, ErrSlotActive)
	case strings.Contains(err.Error(), "Invalid password"):
		return fmt.Errorf("add key slot %d to %s: %w", slot, path, ErrWrongPassphrase)
	}
	return fmt.Errorf("add key slot %d to %s: %w", slot, path, err)
}

// EraseKeySlot erases key slot slot of the LUKS qcow2 image at path,
// unlocking the image with keep — a passphrase that stays (and its
// encrypted backing file, if any, with backing). A slot already inactive
// is no error (a retried erase); the last active slot is ErrLastSlot (the
// data would be lost); a keep that does not unlock is ErrWrongPassphrase.
func (t *Tool) EraseKeySlot(ctx context.Context, path string, slot int, keep, backing []byte) error {
	if slot < 0 || slot >= MaxKeySlots {
		return fmt.Errorf("erase key slot of %s: slot %d: must be 0 to %d", path, slot, MaxKeySlots-1)
	}
	args, _ := amendArgs(path, backing != nil)
	args = append(args, "-o", "encrypt.state=inactive,encrypt.keyslot="+strconv.Itoa(slot))
	err := runWithSecrets(ctx, t.qemuImg, args, secretsOf(keep, backing)...)
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "is already erased"):
		return nil
	case strings.Contains(err.Error(), "erase the only active keyslot"):
		return fmt.Errorf("erase key slot %d of %s: %w", slot, path, ErrLastSlot)
	case strings.Contains(err.Error(), "Invalid password"):
		return fmt.Errorf("erase key slot %d of %s: %w", slot, path, ErrWrongPassphrase)
	}
	return fmt.Errorf("erase key slot %d of %s: %w", slot, path, err)
}

func (t *Tool) iterOpt() string {
	if t.iterTime <= 0 {
		return ""
	}
	return ",encrypt.iter-time=" + strconv.FormatInt(t.iterTime.Milliseconds(), 10)
}
