// Package part is the contract between hostctl's controller core and the
// host features around it (issue 22: "parts").
//
// A part is one host feature — a watchdog, passthrough devices, shares,
// encrypted disks — in its own package. It implements Part, and those of
// the optional phases (Claimer, Definer, Starter, PreStarter, Remover,
// MediaChanger, Publisher, Transporter, Completer, Committer, StartFailer) it has work in. The daemon registers
// the parts; the core runs each phase over them (Set: in registration
// order, the parts that implement the phase and act on the operation —
// Check: those that do not answer Nothing), at these points of every
// operation, in this order:
//
//	PreStart    start, hard reboot: before the instance's lock is taken,
//	            with the stored spec; may have the core apply it again
//	Complete    apply: completes the spec before anything is checked
//	Claim       apply: takes what the instance needs of the host before
//	            its domain is planned; told the operation's outcome
//	Check       refuses the operation with a reason; nothing changed yet
//	Prepare     contributes domain devices and fw_cfg entries, registers
//	            undo steps on the operation's revert
//	Defined     apply, resize, rebuild, hot-plug, republish: the domain
//	            is defined and read back (libvirt's MACs are in the spec)
//	ChangeMedium, Publish
//	            every publish, before the store write: the config drive
//	            the core built, then the metadata tree
//	Committed   the record is written (or removed by a force delete)
//	BeforeStart right before the domain starts, whatever the operation
//	StartFailed the domain's start failed, whatever the operation
//	Remove      delete: after the domain is gone, before the record
//	AfterStart, AfterStop, AfterDelete
//	            after the hypervisor did so; a failure is logged
//
// A phase's error stops the operation, which undoes what it did (the
// revert); the after-phases' and Committed's do not.
//
// Every operation is an Op value every part sees, and every part
// declares, in Answers, what it does for every operation: act, refuse
// (with the reason), or nothing. A table test in hostctl/daemon, over
// every registered part and every Op, fails when a part has not declared
// its answer: a new operation or a new part cannot silently forget the
// other.
//
// This package imports nothing of hostctl but the instance model, the
// metadata tree, the revert helper and the error kinds; parts import it,
// the core runs them, the daemon registers them.
package part

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// Op is an operation on an instance.
type Op string

// The operations. Every part answers every one of them (Ops lists them).
const (
	Apply       Op = "apply"
	Start       Op = "start"
	Stop        Op = "stop"
	RebootSoft  Op = "reboot-soft"
	RebootHard  Op = "reboot-hard"
	Delete      Op = "delete"
	ForceDelete Op = "force-delete"
	Adopt       Op = "adopt"
	Shelve      Op = "shelve"
	Unshelve    Op = "unshelve"
	Rescue      Op = "rescue"
	Unrescue    Op = "unrescue"
	Resize      Op = "resize"
	Rebuild     Op = "rebuild"
	Snapshot    Op = "snapshot"
	// MigrateCold moves a stopped instance to another host (hostctl/migrate):
	// its disks copied, its secrets rewrapped there, its domain defined and
	// started there; the instance then waits in verify.
	MigrateCold Op = "migrate"
	// ConfirmMigration ends a move in verify: what the instance left on
	// its source host goes.
	ConfirmMigration Op = "confirm-migration"
	// RevertMigration ends a move in verify the other way: what the
	// destination made goes and the instance runs on its source again.
	RevertMigration Op = "revert-migration"
	// MigrateLive moves a running instance to another host through
	// libvirt's own migration (hostctl/migrate, live.go): the guest keeps
	// running; the move ends without verify once the source's copy is
	// gone.
	MigrateLive Op = "migrate-live"
	// Evacuate rebuilds an instance whose host is down on another host
	// (hostctl/migrate, evacuate.go): its record taken over, its disks
	// made anew from its image and flavor (new secrets for encrypted
	// ones), a new one-time-use device claimed and burned, its domain
	// defined and started there. When the dead host comes back it removes
	// what it still holds of the instance (the parts told through Mover
	// with this op); its burned devices stay burned.
	Evacuate Op = "evacuate"
)

// Ops returns every operation, in a fixed order.
func Ops() []Op {
	return []Op{Apply, Start, Stop, RebootSoft, RebootHard, Delete, ForceDelete, Adopt,
		Shelve, Unshelve, Rescue, Unrescue, Resize, Rebuild, Snapshot,
		MigrateCold, ConfirmMigration, RevertMigration, MigrateLive, Evacuate}
}

// Action is what a part does for an operation.
type Action int

// The actions a part can declare.
const (
	// Nothing: the operation does not concern the part.
	Nothing Action = iota + 1
	// Act: the core calls the part's phases for the operation.
	Act
	// Refuse: the operation is refused for an instance that uses the
	// part (Check names the reason).
	Refuse
)

func (a Action) String() string {
	switch a {
	case Nothing:
		return "nothing"
	case Act:
		return "act"
	case Refuse:
		return "refuse"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Answer is a part's declaration for one operation. Why is required for
// Refuse (the reason the refusal gives) and says what Act does.
type Answer struct {
	Do  Action
	Why string
}

// Answers is a part's declaration for every operation.
type Answers map[Op]Answer

// Missing lists the operations a has no valid answer for: none, an
// unknown action, or a refusal without a reason.
func (a Answers) Missing() []Op {
	var out []Op
	for _, op := range Ops() {
		ans, ok := a[op]
		switch {
		case !ok, ans.Do < Nothing || ans.Do > Refuse, ans.Do == Refuse && strings.TrimSpace(ans.Why) == "":
			out = append(out, op)
		}
	}
	return out
}

// Instance is what a part sees of the instance an operation is about.
type Instance struct {
	// Spec is the instance's spec (its flavor laid out); parts read it
	// and, in Prepare, may complete it.
	Spec *model.Instance
	// FlavorExtraSpecs are the extra specs of the instance's registered
	// flavor (nil without one).
	FlavorExtraSpecs map[string]string
	// ImageProperties are the properties of the instance's image (nil
	// without one).
	ImageProperties map[string]string
	// Old is the spec the operation changes (an apply's stored spec, the
	// spec before a hot-plug); nil for a new instance and for an
	// operation that does not change the spec.
	Old *model.Instance
	// Host is the host the instance lives on (its record's owner; another
	// host's for a force delete). Set for the Check, the after-phases and
	// Committed of a stored instance; "" when hosts are not tracked.
	Host string
	// Revision is the metadata revision the operation's publish makes
	// (an apply's, for the Prepare of the definition it makes); 0 when
	// the core does not know it yet.
	Revision int64
}

// Device is a domain device a part gives an instance.
type Device struct {
	// Kind names the part ("watchdog"), Detail what the device is
	// ("i6300esb, action reset"), both for `hostctl instance show`.
	Kind   string
	Detail string
	// XML is the device element for the domain's <devices> (one element).
	XML []byte
}

// Contribution collects what the parts' Prepare give a domain.
type Contribution struct {
	Devices []Device
	// Firmware are fw_cfg entries (<sysinfo type='fwcfg'>) the domain
	// hands its guest: files QEMU reads when the domain starts.
	Firmware []FirmwareFile
}

// FirmwareFile is one fw_cfg entry of a domain: its name
// ("opt/<reverse-domain>/<name>") and the host file, in the data
// directory, QEMU reads it from.
type FirmwareFile struct {
	Name string
	File string
}

// Answerer is what every host feature declares, whether the core drives
// it through the phases of Part or through an interface of its own (the
// disks, which the core lays out before any part's Prepare): its name and
// its answer to every operation. The parts × operations table lists them.
type Answerer interface {
	// Name names the feature (unique among the registered ones).
	Name() string
	// Answers declares what it does for every operation.
	Answers() Answers
}

// Part is one host feature as the core drives it, through the phases the
// package doc orders. A part must be safe for concurrent use (the core
// holds the instance's lock, not a global one).
type Part interface {
	Answerer
	// Check refuses op for in with an error naming the reason (for
	// Refuse answers: only when in uses the part); it changes nothing.
	Check(ctx context.Context, op Op, in *Instance) error
	// Prepare contributes the part's domain devices for op to c and
	// registers on r the undo of anything it changed.
	Prepare(ctx context.Context, op Op, in *Instance, r *revert.Reverter, c *Contribution) error
	// Devices lists the devices the part gives in (instance show); no
	// side effects.
	Devices(in *Instance) ([]Device, error)
	// AfterStart, AfterStop and AfterDelete follow the domain's start,
	// stop and the instance's deletion; an error is reported, not undone.
	// AfterStop is also called for a domain the reconciler finds shut off
	// (the guest powered off), again on every pass: it must do nothing
	// for an instance it was told of already.
	AfterStart(ctx context.Context, in *Instance) error
	AfterStop(ctx context.Context, in *Instance) error
	AfterDelete(ctx context.Context, in *Instance) error
}

// The optional phases (and Completer, Committer in more.go): a part that
// has work at one of these points of an operation implements the
// interface; the others need not. Their Instance has Spec (and Old)
// only: the flavor's extra specs and the image's properties are read for
// Check, Prepare and Devices.

// Claimer is a part that takes what an instance needs of the host before
// the core plans its domain: on an apply, for the parts that answer Act,
// before anything else changes. Claim completes in.Spec with what it
// took; end is called once the operation is over, with its error:
// non-nil gives back what this Claim took, nil lets go of what the
// instance no longer asks for.
type Claimer interface {
	Claim(ctx context.Context, op Op, in *Instance) (end func(ctx context.Context, err error), err error)
}

// Definer is a part with work once the instance's domain is defined and
// read back (libvirt's MACs and guest addresses are in in.Spec), before
// the core publishes the spec: for the parts that answer Act for op, on
// an apply, resize or rebuild; on a device hot-plug and the reconciler's
// republish of a domain changed outside hostctl as op Apply. in.Old is
// the spec before (nil for a new instance). Its undo steps go on r.
type Definer interface {
	Defined(ctx context.Context, op Op, in *Instance, r *revert.Reverter) error
}

// Starter is a part with work just before the core starts the
// instance's domain, whatever the operation (start, hard reboot,
// unshelve, unrescue, the restart a failed operation's undo makes). Its
// undo steps go on r: they run when the start fails.
type Starter interface {
	BeforeStart(ctx context.Context, in *Instance, r *revert.Reverter) error
}

// Remover is a part with something to take down while an instance is
// deleted (for the parts that answer Act for op), after its domain and
// before its record: its undo steps go on r, so a delete that fails
// leaves it as it was.
type Remover interface {
	Remove(ctx context.Context, op Op, in *Instance, r *revert.Reverter) error
}

// PreStarter is a part with work before a start or a hard reboot takes
// the instance's lock (for the parts that answer Act for op), given the
// stored spec: it may bring what the instance holds in line with it, and
// have the core apply the spec again (which takes the lock).
type PreStarter interface {
	PreStart(ctx context.Context, op Op, in *Instance) error
}

// Publisher is a part that carries an instance's published metadata to
// its guest by a way of its own (the firmware entries), beside the
// metadata service and the config drive the core has. The core calls
// it on every publish (whatever the operation: an apply, an unshelve, a
// hot-plug, the reconciler's republish), for the instance show
// (Transporter) and for the reconciler.
type Publisher interface {
	// Publish hands tree, the metadata the store write makes revision
	// rev, to the instance's domain, before that write; its undo steps
	// go on r. commit, when not nil, runs once the write succeeded.
	Publish(ctx context.Context, in *Instance, tree *metadata.Tree, rev int64, r *revert.Reverter) (commit func(), err error)
	// Drifted says how what the part gave the domain no longer agrees
	// with its setting or with rev, the stored revision ("": it agrees);
	// the reconciler then publishes the instance again and logs it.
	Drifted(ctx context.Context, in *Instance, rev int64) string
	Transporter
}

// Transporter is a part that carries the metadata to the guest by a way
// of its own (the config drive, the firmware entries): the instance show
// lists, after the metadata service's, what each one carries.
type Transporter interface {
	// Transport says which revision the part carries to the guest:
	// running says whether the domain runs, stored is the stored
	// metadata's revision (0: none).
	Transport(ctx context.Context, in *Instance, running bool, stored int64) Transport
}

// MediaChanger is the part that hands each publish's config drive to the
// instance's running domain (the core builds the drive and puts it in
// place after the store write); the core calls the first registered
// one. Without one a running domain keeps the drive it booted with.
type MediaChanger interface {
	// ChangeMedium hands staged, the config drive the publish of
	// instance name's revision rev built ("" when it has none), to the
	// instance's domain before the store write; its undo steps go on r.
	// commit runs once the write stood and the drive is in place;
	// warnings go to the publish's answer.
	ChangeMedium(ctx context.Context, r *revert.Reverter, name, staged string, rev int64) (commit func(), warnings []string, err error)
}

// Transport is which metadata revision a way to the guest carries: the
// guest's (Revision) and its next boot's (NextBoot), with a note.
type Transport struct {
	Name     string
	Revision int64
	NextBoot int64
	Note     string
}

// Refusal is the error a Check returns for a Refuse answer.
func Refusal(p Part, op Op, in *Instance) error {
	return &RefusedError{Part: p.Name(), Op: op, Instance: in.Spec.Name, Reason: p.Answers()[op].Why}
}

// RefusedError says a part refused an operation.
type RefusedError struct {
	Part     string
	Op       Op
	Instance string
	Reason   string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s %s: refused by %s: %s", e.Op, e.Instance, e.Part, e.Reason)
}

// Table renders parts × operations as text (for the closing note and
// the table test's log).
func Table(parts []Answerer) string {
	var b strings.Builder
	names := make([]string, 0, len(parts))
	byName := map[string]Answers{}
	for _, p := range parts {
		names = append(names, p.Name())
		byName[p.Name()] = p.Answers()
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "%-13s", "op")
	for _, n := range names {
		fmt.Fprintf(&b, " %-12s", n)
	}
	b.WriteString("\n")
	for _, op := range Ops() {
		fmt.Fprintf(&b, "%-13s", op)
		for _, n := range names {
			ans, ok := byName[n][op]
			s := "MISSING"
			if ok {
				s = ans.Do.String()
			}
			fmt.Fprintf(&b, " %-12s", s)
		}
		b.WriteString("\n")
	}
	return b.String()
}
