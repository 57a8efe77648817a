// Package controller is hostctl's core: it turns instance specs into stored
// instances and published metadata. Apply validates a spec, renders the
// guest-visible tree, builds the config drive and publishes everything in
// one atomic store write; a spec with an error changes nothing.
//
// There is no hypervisor yet: device addresses come from the spec, "none"
// otherwise. The libvirt adapter will fill them in from live domains.
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

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Publisher is told when an instance's published document changed, so
// in-process caches (the metadata server) drop stale copies.
type Publisher interface {
	Invalidate(uuid string)
}

// Controller applies and deletes instances.
type Controller struct {
	store    store.Store
	dataDir  string
	render   metadata.Options
	notify   Publisher
	log      *slog.Logger
	driveFmt configdrive.Format
}

// Options configure a Controller.
type Options struct {
	// DataDir holds per-instance files (instances/<name>/disk.config).
	DataDir string
	Render  metadata.Options
	// Notify is told about every publish and delete (may be nil).
	Notify Publisher
	Logger *slog.Logger
	// DriveFormat of the config drive kept in the data directory.
	DriveFormat configdrive.Format
}

// New returns a controller over st.
func New(st store.Store, opts Options) *Controller {
	c := &Controller{store: st, dataDir: opts.DataDir, render: opts.Render, notify: opts.Notify, log: opts.Logger, driveFmt: opts.DriveFormat}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.driveFmt == "" {
		c.driveFmt = configdrive.ISO9660
	}
	return c
}

// Instance is an instance as the admin API shows it.
type Instance struct {
	Spec            *model.Instance `json:"spec"`
	Revision        int64           `json:"revision"`
	DocumentVersion int64           `json:"document_version,omitempty"`
	ConfigDrive     string          `json:"config_drive,omitempty"`
	// Devices is the devices list the guest sees at "latest".
	Devices []metadata.Device `json:"devices"`
}

// ConflictError is returned when a spec collides with another instance.
type ConflictError struct{ Err error }

func (e *ConflictError) Error() string { return e.Err.Error() }
func (e *ConflictError) Unwrap() error { return e.Err }

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
func (c *Controller) ApplyInstance(ctx context.Context, in *model.Instance) (_ *Instance, err error) {
	expect := int64(0)
	old, err := c.store.Instance(ctx, in.Name)
	switch {
	case err == nil:
		if in.UUID != "" && in.UUID != old.UUID {
			return nil, fmt.Errorf("apply %s: %w: uuid %s differs from the existing instance's %s (delete it first)", in.Name, store.ErrConflict, in.UUID, old.UUID)
		}
		in.UUID = old.UUID
		expect = old.Revision
	case errors.Is(err, store.ErrNotFound):
		if in.UUID == "" {
			in.UUID = newUUID()
		}
	default:
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}

	// Name the field of an address conflict up front; Put re-checks
	// atomically, so a race still ends in a (less specific) conflict.
	for i, a := range in.Addresses {
		owner, err := c.store.LookupAddress(ctx, a)
		switch {
		case err == nil && owner != in.UUID:
			return nil, &ConflictError{Err: fmt.Errorf("apply %s: %w: addresses[%d]: %q is already the address of instance %s (an address identifies one guest)", in.Name, store.ErrConflict, i, a, c.nameOf(ctx, owner))}
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("apply %s: %w", in.Name, err)
		}
	}

	tree, err := metadata.Render(in, c.render)
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

	// Build the drive next to its final place first; it is renamed in
	// only after the store accepted the publish, so a refused spec leaves
	// the old drive (or none) behind.
	dir := c.instanceDir(in.Name)
	_, statErr := os.Stat(dir)
	createdDir := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	drive := filepath.Join(dir, "disk.config")
	staged := drive + ".staged"
	defer func() {
		os.Remove(staged)
		if err != nil && createdDir {
			os.RemoveAll(dir)
		}
	}()
	if err := configdrive.Build(staged, tree.ConfigDriveFiles(), configdrive.Options{Format: c.driveFmt}); err != nil {
		return nil, fmt.Errorf("apply %s: build config drive: %w", in.Name, err)
	}

	rec, doc, err := c.store.Put(ctx, store.Instance{
		Name: in.Name, UUID: in.UUID, ProjectID: in.ProjectID, Addresses: in.Addresses, Spec: specJSON,
	}, store.Document{
		InstanceUUID: in.UUID, ProjectID: in.ProjectID, Addresses: in.Addresses, Tree: enc,
	}, expect)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, &ConflictError{Err: fmt.Errorf("apply %s: %w", in.Name, err)}
		}
		return nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	if c.notify != nil {
		c.notify.Invalidate(in.UUID)
	}
	if rerr := os.Rename(staged, drive); rerr != nil {
		// The publish stands (the store is the source of truth); the drive
		// is rebuilt by the next apply or by `configdrive build`.
		return nil, fmt.Errorf("apply %s: published, but installing the config drive failed: %w", in.Name, rerr)
	}
	c.log.Info("instance published", "name", in.Name, "uuid", in.UUID, "revision", rec.Revision, "document_version", doc.Version)
	devs, err := metadata.Devices(in, "latest")
	if err != nil {
		return nil, err
	}
	return &Instance{Spec: in, Revision: rec.Revision, DocumentVersion: doc.Version, ConfigDrive: drive, Devices: devs}, nil
}

// Get returns an instance by name.
func (c *Controller) Get(ctx context.Context, name string) (*Instance, error) {
	rec, err := c.store.Instance(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", name, err)
	}
	return c.fromRecord(ctx, rec, true)
}

// List returns every instance, sorted by name.
func (c *Controller) List(ctx context.Context) ([]*Instance, error) {
	recs, err := c.store.Instances(ctx)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	out := make([]*Instance, 0, len(recs))
	for _, rec := range recs {
		inst, err := c.fromRecord(ctx, rec, false)
		if err != nil {
			return nil, err
		}
		out = append(out, inst)
	}
	return out, nil
}

func (c *Controller) fromRecord(ctx context.Context, rec store.Instance, withVersion bool) (*Instance, error) {
	var in model.Instance
	if err := json.Unmarshal(rec.Spec, &in); err != nil {
		return nil, fmt.Errorf("instance %s: decode stored spec: %w", rec.Name, err)
	}
	inst := &Instance{Spec: &in, Revision: rec.Revision}
	if withVersion {
		v, err := c.store.DocumentVersion(ctx, rec.UUID)
		if err != nil {
			return nil, fmt.Errorf("instance %s: %w", rec.Name, err)
		}
		inst.DocumentVersion = v
	}
	if drive := filepath.Join(c.instanceDir(rec.Name), "disk.config"); fileExists(drive) {
		inst.ConfigDrive = drive
	}
	devs, err := metadata.Devices(&in, "latest")
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", rec.Name, err)
	}
	inst.Devices = devs
	return inst, nil
}

// Delete removes an instance, its published metadata and its files.
func (c *Controller) Delete(ctx context.Context, name string) error {
	rec, err := c.store.Instance(ctx, name)
	if err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if err := c.store.Delete(ctx, name); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if c.notify != nil {
		c.notify.Invalidate(rec.UUID)
	}
	if err := os.RemoveAll(c.instanceDir(name)); err != nil {
		return fmt.Errorf("delete %s: remove files: %w", name, err)
	}
	c.log.Info("instance deleted", "name", name, "uuid", rec.UUID)
	return nil
}

// WriteConfigDrive streams a freshly built config drive of the instance's
// published tree to w.
func (c *Controller) WriteConfigDrive(ctx context.Context, name string, format configdrive.Format, w io.Writer) (int64, error) {
	rec, err := c.store.Instance(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	doc, err := c.store.Document(ctx, rec.UUID)
	if err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	tree, err := metadata.DecodeTree(doc.Tree)
	if err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	tmp, err := os.MkdirTemp(c.dataDir, "drive-")
	if err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	p := filepath.Join(tmp, "disk.config")
	if err := configdrive.Build(p, tree.ConfigDriveFiles(), configdrive.Options{Format: format}); err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	defer f.Close()
	return io.Copy(w, f)
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
