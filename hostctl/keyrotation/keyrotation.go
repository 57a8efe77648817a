// Package keyrotation rotates the keys vmeta holds, on policies, one class
// at a time, crash-safe (the design of Rook's CephX key rotation,
// translated to vmeta's keys).
//
// Every class of keys has a policy (Disabled, WithVersionUpgrade,
// KeyGeneration) with a wanted generation, and a status: the generation
// its keys are at, the vmeta version that minted them, how many prior
// keys are still valid (overlapping classes) and what is pending. The
// classes:
//
//	class              kind          rotation
//	key-encryption-key daemon        in place: new generation, rewrap every secret, retire old ones
//	token-signing-key  daemon        in place, the old key kept for the longest token lifetime
//	proxy-secret       non-daemon    overlapping: keepPriorKeyCount prior secrets stay valid
//	disk-passphrases   non-daemon    in place through LUKS key slots, per instance
//	cephx              non-daemon    overlapping: a new client.vmeta-<host>.<gen> per rotation (cephx.go)
//
// A class's procedure is a Rotator. The Engine runs in the controller's
// reconcile: for each class (and each instance, for disk passphrases) it
// compares policy and status, calls the Rotator when a rotation is due and
// persists the status as soon as that subject is done, so a restart never
// rotates a finished subject again. A rotation is named by the generation
// it reaches: a Rotator called again for the same generation after a
// crash finishes that rotation rather than minting another key.
package keyrotation

import (
	"context"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/internal/errkind"
)

// Class names a class of keys.
type Class string

// The classes of keys vmeta holds.
const (
	KEK   Class = "key-encryption-key"
	Token Class = "token-signing-key"
	Proxy Class = "proxy-secret"
	Disk  Class = "disk-passphrases"
	// CephX is this host's CephX client for CephFS shares
	// (client.vmeta-<host>.<generation>; see cephx.go).
	CephX Class = "cephx"
)

// Classes are every class, in the order the Engine rotates them.
var Classes = []Class{KEK, Token, Proxy, Disk, CephX}

// Overlapping reports whether a class rotates by overlapping (prior keys
// stay valid, up to keepPriorKeyCount) — the proxy secret, which the
// proxies hold — rather than in place.
func (c Class) Overlapping() bool { return c == Proxy || c == CephX }

// Daemon reports whether only vmeta's own processes use the class's keys
// (so it may rotate them unattended, on a version upgrade).
func (c Class) Daemon() bool { return c == KEK || c == Token }

// PerInstance reports whether the class has a subject per instance.
func (c Class) PerInstance() bool { return c == Disk }

// ParseClass parses a class name.
func ParseClass(s string) (Class, error) {
	for _, c := range Classes {
		if string(c) == s {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w: class %q: must be one of key-encryption-key, token-signing-key, proxy-secret, disk-passphrases, cephx", ErrInvalid, s)
}

// PolicyName is a key rotation policy.
type PolicyName string

// The policies.
const (
	// Disabled (or empty): keys are not rotated after their creation.
	Disabled PolicyName = "Disabled"
	// WithVersionUpgrade: rotate when hostctl runs a newer version than
	// the one that minted the keys (daemon classes and disk passphrases).
	WithVersionUpgrade PolicyName = "WithVersionUpgrade"
	// KeyGeneration: rotate when the wanted generation is above the
	// status generation.
	KeyGeneration PolicyName = "KeyGeneration"
)

// Errors.
var (
	// ErrInvalid: a policy is malformed or not allowed for its class.
	ErrInvalid = errkind.New(errkind.Invalid, "invalid key rotation policy")
	// ErrDecrease: a policy would lower the wanted generation.
	ErrDecrease = errkind.New(errkind.Conflict, "key generation cannot be decreased")
)

// Policy is what an operator wants for a class (or one instance's disk
// passphrases).
type Policy struct {
	KeyRotationPolicy PolicyName `json:"keyRotationPolicy,omitempty" yaml:"keyRotationPolicy,omitempty"`
	// KeyGeneration is the wanted generation (policy KeyGeneration).
	KeyGeneration int64 `json:"keyGeneration,omitempty" yaml:"keyGeneration,omitempty"`
	// KeepPriorKeyCount is how many prior keys stay valid (overlapping
	// classes only; nil: 1).
	KeepPriorKeyCount *int `json:"keepPriorKeyCount,omitempty" yaml:"keepPriorKeyCount,omitempty"`
}

// MaxKeepPriorKeyCount bounds KeepPriorKeyCount (as Rook's 0–10).
const MaxKeepPriorKeyCount = 10

// Keep returns how many prior keys an overlapping class keeps (default 1);
// 0 for the other classes.
func (p Policy) Keep(c Class) int {
	if !c.Overlapping() {
		return 0
	}
	if p.KeepPriorKeyCount == nil {
		return 1
	}
	return *p.KeepPriorKeyCount
}

// Check reports whether p is a valid policy for class c, naming the
// field, the value and the rule.
func (p Policy) Check(c Class) error {
	switch p.KeyRotationPolicy {
	case "", Disabled, KeyGeneration:
	case WithVersionUpgrade:
		if c == CephX {
			return fmt.Errorf("%w: %s: keyRotationPolicy %q: %s", ErrInvalid, c, p.KeyRotationPolicy, CephXVersionUpgradeRefused)
		}
		if c.Overlapping() {
			return fmt.Errorf("%w: %s: keyRotationPolicy %q: not allowed for a key other parties hold (the proxies must be updated by hand): use KeyGeneration", ErrInvalid, c, p.KeyRotationPolicy)
		}
	default:
		return fmt.Errorf("%w: %s: keyRotationPolicy %q: must be Disabled, WithVersionUpgrade or KeyGeneration", ErrInvalid, c, p.KeyRotationPolicy)
	}
	if p.KeyGeneration < 0 {
		return fmt.Errorf("%w: %s: keyGeneration %d: must not be negative", ErrInvalid, c, p.KeyGeneration)
	}
	if p.KeepPriorKeyCount != nil {
		if !c.Overlapping() {
			return fmt.Errorf("%w: %s: keepPriorKeyCount %d: only for overlapping rotation (%s, %s)", ErrInvalid, c, *p.KeepPriorKeyCount, Proxy, CephX)
		}
		if n := *p.KeepPriorKeyCount; n < 0 || n > MaxKeepPriorKeyCount {
			return fmt.Errorf("%w: %s: keepPriorKeyCount %d: must be 0 to %d", ErrInvalid, c, n, MaxKeepPriorKeyCount)
		}
	}
	return nil
}

// CheckUpdate reports whether next may replace prev: valid, and, for
// the KeyGeneration policy, its wanted generation not lower. The other
// policies ignore keyGeneration (as the specification says), so a
// switch to Disabled or WithVersionUpgrade is never a decrease; Merge
// keeps the stored wanted generation across it.
func CheckUpdate(c Class, prev, next Policy) error {
	if err := next.Check(c); err != nil {
		return err
	}
	if next.KeyRotationPolicy == KeyGeneration && next.KeyGeneration < prev.KeyGeneration {
		return fmt.Errorf("%w: %s: keyGeneration %d is below %d", ErrDecrease, c, next.KeyGeneration, prev.KeyGeneration)
	}
	return nil
}

// Merge returns the policy stored when next replaces prev (CheckUpdate
// has accepted it): next, with a policy other than KeyGeneration keeping
// prev's wanted generation when next names a lower one (it ignores it),
// so the wanted generation never decreases, also across a time spent
// Disabled or WithVersionUpgrade.
func Merge(prev, next Policy) Policy {
	if next.KeyRotationPolicy != KeyGeneration {
		next.KeyGeneration = max(next.KeyGeneration, prev.KeyGeneration)
	}
	return next
}

// Status is where a subject's keys are.
type Status struct {
	// KeyGeneration: 1 when the keys were first created, +1 (or up to the
	// wanted generation) per rotation, never decreasing; 0: the keys
	// existed before rotation was tracked.
	KeyGeneration int64 `json:"keyGeneration"`
	// KeyVersion is the vmeta version that minted the keys in use ("":
	// unknown).
	KeyVersion string `json:"keyVersion"`
	// KeyCephVersion is the Ceph version of the cluster that minted the
	// keys in use (class cephx; "": unknown), as `ceph version` reports
	// it: the specification's keyCephVersion.
	KeyCephVersion string `json:"keyCephVersion,omitempty"`
	// PriorKeyCount is how many prior keys are still valid (overlapping
	// classes).
	PriorKeyCount *int `json:"priorKeyCount,omitempty"`
	// Pending says why a begun rotation (Target) waits ("" when it does
	// not): the procedure's reason, such as a running instance whose disks
	// rotate when it next stops.
	Pending string `json:"pending,omitempty"`
	// Progress of a rotation in progress (items done of total).
	Progress *Progress `json:"progress,omitempty"`
	// Target is the generation of a rotation begun and not yet finished
	// (0: none): recorded before the procedure starts, so a restart
	// finishes the same rotation whatever the policy says by then.
	Target int64 `json:"target,omitempty"`
	// Error is the last rotation attempt's failure, if it failed.
	Error string `json:"error,omitempty"`
	// Updated is when the status last changed.
	Updated time.Time `json:"updated"`
}

// Progress counts the items of a rotation (secrets rewrapped, disks
// re-keyed).
type Progress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// Complete reports whether a KeyGeneration rotation is complete: status
// generation ≥ wanted generation.
func Complete(p Policy, s Status) bool { return s.KeyGeneration >= p.KeyGeneration }

// Subject is what a status is kept for: a class, and for disk passphrases
// an instance.
type Subject struct {
	Class Class `json:"class"`
	// InstanceUUID and InstanceName, for per-instance classes.
	InstanceUUID string `json:"instance_uuid,omitempty"`
	InstanceName string `json:"instance_name,omitempty"`
	// Created is when the subject's keys were made, when known: keys made
	// after the host began tracking rotation start at generation 1, older
	// ones at 0.
	Created time.Time `json:"-"`
}

func (s Subject) String() string {
	if s.InstanceUUID != "" {
		return string(s.Class) + "/" + s.InstanceUUID
	}
	return string(s.Class)
}

// Result is what one call of a Rotator did.
type Result struct {
	// Done: the subject's keys are at the generation asked for. When
	// false, Pending says why not yet (a running instance), and the
	// Engine asks again on a later reconcile.
	Done    bool
	Pending string
	// PriorKeyCount after the rotation (overlapping classes).
	PriorKeyCount *int
	// KeyCephVersion is the Ceph version that minted the new keys
	// (class cephx).
	KeyCephVersion string
}

// Rotator is one class's rotation procedure.
type Rotator interface {
	// Rotate rotates the subject's keys to generation gen, keeping keep
	// prior keys valid (overlapping classes; 0 otherwise), reporting
	// progress through progress (may be nil). It must be idempotent for
	// a given gen: called again after a crash or an error at any step, it
	// finishes the same rotation (never mints a second new key for gen),
	// and when the keys are already at gen it only reports Done.
	Rotate(ctx context.Context, s Subject, gen int64, keep int, progress func(Progress)) (Result, error)
}

// Recoverer is a Rotator with state to recover at start-up, before
// anything else uses its keys (an interrupted disk passphrase rotation is
// finished or redone by checking which stored passphrase opens the disk).
type Recoverer interface {
	Recover(ctx context.Context) error
}

// Generationer is a Rotator that knows the generation a subject's keys
// are at (the KEK file's current generation; the lowest of an instance's
// disks'): the Engine starts a subject's status there when it first sees
// it.
type Generationer interface {
	Generation(ctx context.Context, s Subject) (int64, error)
}

// Lister lists the subjects of a per-instance class (the instances with
// encrypted disks on this host).
type Lister interface {
	Subjects(ctx context.Context) ([]Subject, error)
}

// InstanceChecker is a per-instance class's procedure that says whether
// an instance still exists (on any host): the Engine's Run deletes the
// records of the instances that do not (one whose records could not be
// deleted with it, or was deleted before they were).
type InstanceChecker interface {
	InstanceExists(ctx context.Context, uuid string) (bool, error)
}

// Pruner drops the prior keys of an overlapping class beyond keep (the
// operator says the proxies are updated: `hostctl keys prune proxy`).
type Pruner interface {
	Prune(ctx context.Context, keep int) (priorKeyCount int, err error)
}
