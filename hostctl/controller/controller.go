// Package controller is hostctl's core: it turns instance specs into
// stored instances, published metadata and — with a hypervisor — libvirt
// domains.
//
// Apply validates a spec, renders the guest-visible tree, builds the
// config drive and publishes everything in one atomic store write; a spec
// with an error changes nothing. Without a hypervisor (hostctl serve
// --virt none) device addresses come from the spec, "none" otherwise.
//
// With a Hypervisor (libvirt through hostctl/virt), Apply also creates
// the disks (the disks part, hostctl/parts/disks), defines the domain,
// reads the addresses, MACs and serials libvirt chose back from its XML
// into the instance before rendering; the parts (hostctl/part: DHCP leases, passthrough devices,
// ...) add what their features need. Devices are
// attached and detached by tag, instances started, stopped and deleted;
// the reconciler (hostctl/reconcile, over core_reconcile.go) follows
// libvirt's events to notice domains and devices removed behind hostctl's
// back. Every multi-step change undoes what it
// did when a later step fails (revert.go): libvirt, the network, the
// files and the store are left as they were.
//
// The metadata describes the running configuration of a running domain
// and the persistent one of a domain that is shut off. Every publish of a
// running domain also puts the rebuilt config drive into its cdrom, as a
// new file, by a forced media change (parts/configdrive). Shares are virtiofs
// filesystems of host directories under the share root; the share
// service (hostctl/shares) is a part: it merges an instance's mapped
// shares into every apply and follows its starts, stops and deletes
// (phases.go), and hot-plugs shares into running instances through
// hostctl/ops (liveshares.go) over the device-change primitives
// (core_devchange.go).
package controller

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/shares/hostdir"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/internal/keylock"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// Publisher is told when an instance's published document changed, so
// in-process caches (the metadata server) drop stale copies.
type Publisher interface {
	Invalidate(uuid string)
}

// Store is what the controller needs from the store: instance records
// and their published documents (store.Store has both).
type Store interface {
	store.Instances
	store.Documents
}

// Controller applies and deletes instances.
type Controller struct {
	store    Store
	dataDir  string
	render   metadata.Options
	notify   Publisher
	log      *slog.Logger
	driveFmt configdrive.Format

	hostName string
	hosts    Hosts
	audit    *events.Log

	drv           driver
	domains       Domains
	hotplug       HotPlug
	dom           virt.Options
	imageDir      *images.Dir       // the image directory (shared with the catalog and the disks part)
	flavors       *flavors.Registry // nil when the store keeps no records
	records       store.Records     // flavors; nil when the store keeps none
	encHost       policy.Host
	shareRoot     hostdir.Root
	detachTimeout time.Duration

	locks keylock.Map

	observer func(op string, took time.Duration, err error)

	parts part.Set // the host features, in registration order (phases.go)
	disks Disks    // the disks part among them (disks.go; noDisks without one)
}

// Observe tells Options.Observe that op, begun at start, ended with
// *err; operations (the core's, hostctl/ops') defer it first thing:
//
//	defer c.Observe("start", time.Now(), &err)
func (c *Controller) Observe(op string, start time.Time, err *error) {
	if c.observer != nil {
		c.observer(op, time.Since(start), *err)
	}
}

// DefaultDetachTimeout bounds the wait for a running guest to release a
// device detached live (Options.DetachTimeout).
const DefaultDetachTimeout = 10 * time.Second

// Options configure a Controller.
type Options struct {
	// DataDir holds per-instance files (instances/<name>/: disk.config,
	// the disk images, console.log).
	DataDir string
	Render  metadata.Options
	// Notify is told about every publish and delete (may be nil).
	Notify Publisher
	Logger *slog.Logger
	// DriveFormat of the config drive kept in the data directory.
	DriveFormat configdrive.Format

	// Host names this host among the hosts sharing the store; it is
	// written into every record this controller creates, and the
	// controller acts only on records that name it. Empty: hosts are not
	// tracked (every record is this controller's).
	Host string
	// Hosts tells whether another host is down, for the adopt and the
	// forced delete of its instances (OwnerDown, core_ops.go; nil:
	// both are refused), and lists the hosts.
	Hosts Hosts

	// Audit is where the controller's parts emit the events other tools
	// follow (hostctl/events); nil: JSON-lines files in
	// <DataDir>/events.
	Audit *events.Log

	// Hypervisor runs the instances as libvirt domains; nil keeps the
	// hypervisor-less mode (addresses from the spec, no domains).
	Hypervisor Hypervisor
	// Domain shapes the domains: accelerator (TCG by default), default
	// network, memory, config drive bus, direct kernel boot.
	Domain virt.Options
	// Images is the image directory (hostctl/images) the base images a
	// spec's image names are in, shared with the catalog and the disks
	// part; nil: <DataDir>/images.
	Images *images.Dir
	// ShareRoot is the directory every share's source must be in (a
	// virtiofs share exports its directory read-write, with virtiofsd
	// running as root); <DataDir>/shares when empty.
	ShareRoot string
	// QemuImg is the qemu-img binary; "qemu-img" (from PATH) when empty.
	QemuImg string
	// Records keeps the flavors; the store itself when nil and it keeps
	// records (store.Store does).
	Records store.Records
	// Encryption is this host's ephemeral encryption formats and default
	// format; DefaultEncryptionHost when it names no formats.
	Encryption policy.Host
	// DetachTimeout bounds the wait for a running guest to release a
	// device detached live (virtio devices need the guest's consent);
	// DefaultDetachTimeout when 0. A detach still pending then is reported as a warning.
	DetachTimeout time.Duration

	// Observe, when set, is told of every instance operation as it ends
	// (op: apply, start, stop, delete, and those of hostctl/ops:
	// attach_disk, shelve, reboot, ...): how long it took, waiting for the
	// instance's lock included, and its error (nil on success). It must
	// be quick and safe for concurrent use (metrics).
	Observe func(op string, took time.Duration, err error)

	// Parts are the host features the daemon registers (hostctl/part);
	// the core calls their phases, in this order, for every operation.
	// The disks part (hostctl/parts/disks) is among them: the core calls
	// it through Disks. Without it no disk is made, none is encrypted.
	Parts []part.Part
}

// New returns a controller over st. It starts nothing: the reconciler
// that keeps its instances in line with libvirt is hostctl/reconcile's.
func New(st Store, opts Options) *Controller {
	c := &Controller{store: st, dataDir: opts.DataDir, render: opts.Render, notify: opts.Notify, log: opts.Logger, driveFmt: opts.DriveFormat,
		dom: opts.Domain, shareRoot: hostdir.Root{Dir: opts.ShareRoot}, detachTimeout: opts.DetachTimeout,
		hostName: opts.Host, hosts: opts.Hosts, audit: opts.Audit, observer: opts.Observe,
		parts: opts.Parts}
	c.drv = noDriver{c}
	if hv := opts.Hypervisor; hv != nil {
		c.drv = libvirtDriver{c}
		c.domains, c.hotplug = hv, hv
	}
	c.records, c.imageDir, c.disks = opts.Records, opts.Images, disksOf(opts.Parts)
	if c.records == nil {
		c.records, _ = st.(store.Records)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.audit == nil {
		c.audit = events.New(events.NewFiles(filepath.Join(c.dataDir, "events")), c.hostName, c.log)
	}
	if c.driveFmt == "" {
		c.driveFmt = configdrive.ISO9660
	}
	if c.imageDir == nil {
		c.imageDir = images.New(filepath.Join(c.dataDir, "images"), images.Options{QemuImg: opts.QemuImg})
	}
	if c.records != nil {
		c.flavors = &flavors.Registry{Store: c.records}
	}
	c.encHost = opts.Encryption
	if len(c.encHost.Formats) == 0 {
		c.encHost = DefaultEncryptionHost
	}
	if c.shareRoot.Dir == "" {
		c.shareRoot.Dir = filepath.Join(c.dataDir, "shares")
	}
	if c.detachTimeout == 0 {
		c.detachTimeout = DefaultDetachTimeout
	}
	if c.dom.DefaultNetwork == "" {
		c.dom.DefaultNetwork = model.DefaultNetwork
	}
	return c
}

// Apply creates or updates the instance a spec describes. Re-applying an
// unchanged spec republishes it (with a fresh random_seed). A spec naming
// an existing instance with a different UUID is refused with ErrConflict.
func (c *Controller) Apply(ctx context.Context, spec []byte) (*Instance, error) {
	in, err := model.ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return c.ApplyInstance(ctx, in)
}

// ApplyInstance is Apply for an already parsed and validated instance.
//
// With a hypervisor, re-applying an instance updates its domain: a domain
// that is shut off is redefined (new disks are created, removed ones
// deleted after the publish), a running one accepts only changes that
// need no new hardware (tags, metadata, addresses, DHCP leases); adding
// or removing devices of a running domain is refused (attach and detach
// them, or stop it first).
func (c *Controller) ApplyInstance(ctx context.Context, in *model.Instance) (_ *Instance, err error) {
	defer c.Observe("apply", time.Now(), &err)
	st := newSteps(in.Name)
	defer st.log(c.log, "apply instance steps")
	defer c.locks.Lock(in.Name)()
	st.done("lock")
	old, expect, err := c.existing(ctx, in)
	if err != nil {
		return nil, err
	}
	st.done("existing")
	// The parts complete the spec first (the shares part: the instance's
	// mapped shares); r undoes that when the apply fails.
	r := revert.New(c.log, "apply "+in.Name)
	defer r.Fail(&err)
	if err := c.parts.Complete(ctx, part.Apply, &part.Instance{Spec: in}, r); err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	if in.Image != "" {
		// The image cannot be deleted while this apply uses it.
		defer c.imageDir.Use(in.Image)()
	}
	// The flavor's layout and the encryption decision first: they only
	// decide, so a refusal there has nothing to undo.
	warn, err := c.Layouts().Apply(ctx, in, old) // hostctl/layout
	if err != nil {
		return nil, err
	}
	st.done("layout")
	end, err := c.parts.Claim(ctx, part.Apply, &part.Instance{Spec: in, Old: old}) // in is completed with what they took
	if err != nil {
		return nil, err
	}
	st.done("parts")
	inst, err := c.drv.apply(ctx, part.Apply, in, old, expect)
	end(ctx, err)
	if err != nil {
		return nil, err
	}
	r.Success()
	st.done("domain")
	inst.Warnings = append(inst.Warnings, warn...)
	inst.Warnings = append(inst.Warnings, c.parts.Committed(ctx, part.Apply, &part.Instance{Spec: in})...)
	return inst, nil
}

// existing looks up the stored instance of in's name: its spec (nil for a
// new instance) and the revision a write must expect. It sets in.UUID
// (kept from the stored instance, or generated) and refuses a UUID that
// differs from the stored one.
func (c *Controller) existing(ctx context.Context, in *model.Instance) (*model.Instance, int64, error) {
	rec, err := c.store.Instance(ctx, in.Name)
	switch {
	case err == nil:
		if !c.owns(rec) {
			return nil, 0, c.otherHost("apply", rec)
		}
		if in.UUID != "" && in.UUID != rec.UUID {
			return nil, 0, fmt.Errorf("apply %s: %w: uuid %s differs from the existing instance's %s (delete it first)", in.Name, store.ErrConflict, in.UUID, rec.UUID)
		}
		in.UUID = rec.UUID
		old, err := decodeSpec(rec)
		if err != nil {
			return nil, 0, err
		}
		return old, rec.Revision, nil
	case errors.Is(err, store.ErrNotFound):
		if in.UUID == "" {
			in.UUID = newUUID()
		}
		return nil, 0, nil
	default:
		return nil, 0, fmt.Errorf("apply %s: %w", in.Name, err)
	}
}

func decodeSpec(rec store.Instance) (*model.Instance, error) {
	var in model.Instance
	if err := json.Unmarshal(rec.Spec, &in); err != nil {
		return nil, fmt.Errorf("instance %s: decode stored spec: %w", rec.Name, err)
	}
	return &in, nil
}

// publish renders in, builds its config drive next to the final one
// (none with config_drive: false, which removes an earlier one after the
// Put), and stores record and document in one Put expecting revision
// expect.
// The Put is the commit point: r.Success is called right after it, and
// only then is the drive renamed into place (a refused or failed publish
// leaves the old drive, or none). The cdrom of a running domain gets the
// new drive as its medium before the Put (undone with the rest when the
// publish fails; phases.go).
func (c *Controller) publish(ctx context.Context, r *revert.Reverter, in *model.Instance, expect int64) (*Instance, error) {
	st := newSteps(in.Name)
	defer st.log(c.log, "publish steps")
	// The guest is told what hostctl created, not what the spec asked.
	told, bds, err := c.disks.Told(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	// The Put creates revision expect+1 (1 for a new instance): the
	// revision every transport carries.
	rev := max(expect, 0) + 1
	ropts := c.render
	ropts.Revision = rev
	tree, err := metadata.Render(told, ropts)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	enc, err := tree.Encode()
	if err != nil {
		return nil, err
	}
	specJSON, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("apply %s: encode spec: %w", in.Name, err)
	}
	devs, err := metadata.Devices(told, "latest")
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}

	st.done("render")
	dir := c.instanceDir(in.Name)
	if err := c.mkdirInstance(r, dir); err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	drive := filepath.Join(dir, driveFile)
	staged := drive + ".staged"
	forMedia := "" // the drive the media part gets ("": none)
	if in.WantsConfigDrive() {
		defer os.Remove(staged)
		if err := configdrive.Build(staged, tree.ConfigDriveFiles(), configdrive.Options{Format: c.driveFmt}); err != nil {
			return nil, fmt.Errorf("apply %s: build config drive: %w", in.Name, err)
		}
		forMedia = staged
	}
	mediaCommitted, warn, err := c.parts.ChangeMedium(ctx, r, in.Name, forMedia, rev)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	st.done("drive")
	committed, err := c.parts.Publish(ctx, &part.Instance{Spec: in}, tree, rev, r)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	st.done("firmware")

	rec, doc, err := c.store.Put(ctx, store.Instance{
		Name: in.Name, UUID: in.UUID, ProjectID: in.ProjectID, Host: c.hostName, Addresses: in.Addresses, Spec: specJSON,
	}, store.Document{
		InstanceUUID: in.UUID, ProjectID: in.ProjectID, Addresses: in.Addresses, Tree: enc,
	}, expect)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	st.done("store")
	r.Success()
	if c.notify != nil {
		c.notify.Invalidate(in.UUID)
	}
	if rec.Revision != rev {
		c.log.Warn("the store gave the publish another revision than the one rendered into its metadata", "name", in.Name, "rendered", rev, "stored", rec.Revision)
	}
	committed()
	inst := &Instance{Spec: in, Revision: rec.Revision, Host: rec.Host, DocumentVersion: doc.Version, Devices: devs, Warnings: warn, BlockDevices: bds}
	if in.WantsConfigDrive() {
		if rerr := atomicfile.Rename(staged, drive); rerr != nil {
			// The publish stands (the store is the source of truth); the
			// drive is rebuilt by the next apply or by `configdrive build`.
			return nil, fmt.Errorf("apply %s: published, but installing the config drive failed: %w", in.Name, rerr)
		}
		inst.ConfigDrive = drive
	} else if rerr := removeFile(drive); rerr != nil { // config_drive: false (no cdrom): an earlier spec's drive goes
		c.log.Warn("could not remove the config drive of an earlier spec", "file", drive, "err", rerr)
	}
	mediaCommitted()
	c.log.Info("instance published", "name", in.Name, "uuid", in.UUID, "revision", rec.Revision, "document_version", doc.Version, "config_drive", in.WantsConfigDrive())
	return inst, nil
}

// mkdirInstance creates the instance directory if it does not exist and
// registers the removal of every directory it created.
func (c *Controller) mkdirInstance(r *revert.Reverter, dir string) error {
	top := ""
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		top = d
		if filepath.Dir(d) == d {
			break
		}
	}
	if top == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	r.Add("remove "+top, func(context.Context) error { return os.RemoveAll(top) })
	return nil
}

// Get returns an instance by name, with its domain's state.
func (c *Controller) Get(ctx context.Context, name string) (*Instance, error) {
	rec, err := c.store.Instance(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", name, err)
	}
	inst, err := c.fromRecord(ctx, rec, true)
	if err != nil {
		return nil, err
	}
	var tree *metadata.Tree
	if doc, err := c.store.Document(ctx, rec.UUID); err == nil {
		tree, _ = metadata.DecodeTree(doc.Tree)
	}
	if c.owns(rec) { // another host's domain is not in this host's libvirt
		inst.State = c.drv.state(ctx, rec.Name, rec.UUID)
		inst.Transports = c.transports(ctx, inst, tree)
	} else if tree != nil {
		inst.Transports = []part.Transport{{Name: types.TransportHTTP, Revision: metadata.TreeRevision(tree)}}
	}
	// The fault and the kept state as list shows them (core_hostsviews.go).
	shown, err := c.shown().One(ctx, rec, inst.State)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", name, err)
	}
	inst.State, inst.Fault = shown.State, shown.Fault
	return inst, nil
}

// List returns every instance, sorted by name. The states come from one
// listing of libvirt's domains: running or shutoff (Get tells paused and
// the other states apart).
func (c *Controller) List(ctx context.Context) ([]*Instance, error) {
	return c.list(ctx, false)
}

// ListAll is List over every host's instances; another host's have no
// state here (their domains are in that host's libvirt).
func (c *Controller) ListAll(ctx context.Context) ([]*Instance, error) {
	return c.list(ctx, true)
}

func (c *Controller) list(ctx context.Context, all bool) ([]*Instance, error) {
	recs, err := c.store.Instances(ctx)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	shown, err := c.shown().Of(ctx, recs) // core_hostsviews.go
	if err != nil {
		return nil, err
	}
	out := make([]*Instance, 0, len(recs))
	for i, rec := range recs {
		if !all && !c.owns(rec) {
			continue
		}
		inst, err := c.fromRecord(ctx, rec, false)
		if err != nil {
			return nil, err
		}
		inst.State, inst.Fault = shown[i].State, shown[i].Fault
		out = append(out, inst)
	}
	return out, nil
}

func (c *Controller) fromRecord(ctx context.Context, rec store.Instance, withVersion bool) (*Instance, error) {
	in, err := decodeSpec(rec)
	if err != nil {
		return nil, err
	}
	inst := &Instance{Spec: in, Revision: rec.Revision, Host: rec.Host}
	if withVersion {
		v, err := c.store.DocumentVersion(ctx, rec.UUID)
		if err != nil {
			return nil, fmt.Errorf("instance %s: %w", rec.Name, err)
		}
		inst.DocumentVersion = v
	}
	if drive := filepath.Join(c.instanceDir(rec.Name), driveFile); fileExists(drive) {
		inst.ConfigDrive = drive
	}
	told, bds, err := c.disks.Told(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", rec.Name, err)
	}
	devs, err := metadata.Devices(told, "latest")
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", rec.Name, err)
	}
	inst.Devices = devs
	inst.BlockDevices = bds
	if withVersion { // instance show, not every list entry (a flavor and an image read each)
		if inst.HostDevices, err = c.partDevices(ctx, in); err != nil { // phases.go
			return nil, fmt.Errorf("instance %s: %w", rec.Name, err)
		}
	}
	return inst, nil
}

// Delete removes an instance: its domain (destroyed and undefined), its
// DHCP leases, its published metadata and record, and then its files
// (disks, config drive, console log). A failure before the store delete
// undoes the steps before it.
func (c *Controller) Delete(ctx context.Context, name string) (err error) {
	defer c.Observe("delete", time.Now(), &err)
	defer c.locks.Lock(name)()
	rec, err := c.OwnRecord(ctx, "delete", name)
	if err != nil {
		return err
	}
	if err := c.CheckRecordParts(ctx, part.Delete, rec); err != nil { // phases.go
		return err
	}
	r := revert.New(c.log, "delete "+name)
	defer r.Fail(&err)
	if err := c.drv.remove(ctx, r, rec); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if err := c.store.Delete(ctx, name); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	r.Success()
	if c.notify != nil {
		c.notify.Invalidate(rec.UUID)
	}
	// The parts let go of the instance: the disks part of its secrets
	// and block-device records, the states part of its state record and
	// a shelved instance's image.
	c.afterRecordParts(ctx, "delete", rec) // phases.go
	if err := os.RemoveAll(c.instanceDir(name)); err != nil {
		return fmt.Errorf("delete %s: remove files: %w", name, err)
	}
	c.log.Info("instance deleted", "name", name, "uuid", rec.UUID)
	return nil
}

// nameOf names the instance with a UUID for error messages (the UUID itself
// when it cannot be found).
func (c *Controller) nameOf(ctx context.Context, uuid string) string {
	recs, err := c.store.Instances(ctx)
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

func (c *Controller) instanceDir(name string) string {
	return filepath.Join(c.dataDir, "instances", name)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
