package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// DefaultStopTimeout is how long Stop waits for a guest to shut down
// before it powers the domain off.
const DefaultStopTimeout = 30 * time.Second

// shutdownPollInterval is how often Stop asks libvirt whether a guest
// asked to shut down is off yet.
const shutdownPollInterval = 200 * time.Millisecond

// Start boots an instance's domain (a running one is left running). A
// config drive missing from the data directory is rebuilt from the
// published metadata first; media swapped into the cdrom during an
// earlier run are deleted (the domain boots from disk.config). A start
// that fails keeps the instance's passthrough devices for the next start
// (hostctl/parts/passthrough).
func (c *Controller) Start(ctx context.Context, name string) (_ *Instance, err error) {
	defer c.Observe("start", time.Now(), &err)
	if err := c.PreStart(ctx, part.Start, name); err != nil { // phases.go
		return nil, err
	}
	unlock := c.locks.Lock(name)
	rec, cur, err := c.powerTarget(ctx, "start", part.Start, name)
	if err != nil {
		unlock()
		return nil, err
	}
	if !cur.running {
		err = c.Resume(ctx, rec)
	}
	unlock()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c.log.Info("instance started", "name", name)
	return c.Get(ctx, name)
}

// Resume boots rec's domain, not running, with the instance's lock held
// (Start; hostctl/ops once a shelved or rescued state ended, a hard
// reboot): config drive, the parts' BeforeStart (share mounts) and
// libvirt start (startWithSecrets). A start that fails is told to the
// parts' StartFailed (a share that could not be mounted puts the
// instance in ERROR: hostctl/parts/faults).
func (c *Controller) Resume(ctx context.Context, rec store.Instance) error {
	if err := c.EnsureDrive(ctx, rec); err != nil {
		return err
	}
	if err := c.startWithSecrets(ctx, rec); err != nil {
		in, derr := decodeSpec(rec)
		if derr != nil {
			return err // startWithSecrets could not decode it either
		}
		return c.parts.StartFailed(ctx, &part.Instance{Spec: in, Host: rec.Host}, err)
	}
	c.afterRecordParts(ctx, "start", rec) // phases.go
	return nil
}

// Stop asks the guest to shut down (ACPI) and waits up to timeout
// (DefaultStopTimeout when 0) for the domain to be off; then it powers the
// domain off. A domain already off is left so.
func (c *Controller) Stop(ctx context.Context, name string, timeout time.Duration) (_ *Instance, err error) {
	defer c.Observe("stop", time.Now(), &err)
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	unlock := c.locks.Lock(name)
	rec, cur, err := c.powerTarget(ctx, "stop", part.Stop, name)
	if err != nil {
		unlock()
		return nil, err
	}
	var warn []string
	if cur.running {
		warn, err = c.shutdown(ctx, name, timeout)
	}
	if err == nil {
		// QEMU has closed the disks: libvirt no longer needs the
		// passphrases. A failure leaves them to the reconciler.
		if serr := c.disks.UndefineSecrets(ctx, cur.uuid); serr != nil {
			c.log.Warn("libvirt secrets of a stopped instance not undefined (the reconciler retries)", "name", name, "err", serr)
			warn = append(warn, fmt.Sprintf("the disks' passphrases could not be removed from libvirt yet (the reconciler retries): %v", serr))
		}
		c.afterRecordParts(ctx, "stop", rec) // phases.go
	}
	unlock()
	if err != nil {
		return nil, fmt.Errorf("stop %s: %w", name, err)
	}
	c.log.Info("instance stopped", "name", name, "forced", len(warn) > 0)
	inst, err := c.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	inst.Warnings = warn
	return inst, nil
}

func (c *Controller) shutdown(ctx context.Context, name string, timeout time.Duration) ([]string, error) {
	if err := c.domains.Shutdown(ctx, name); err != nil {
		c.log.Info("graceful shutdown refused; powering off", "name", name, "err", err)
	} else {
		deadline := time.Now().Add(timeout)
		for time.Now().Before(deadline) {
			st, err := c.domains.State(ctx, name)
			if err != nil {
				return nil, err
			}
			if st == virt.StateShutoff {
				return nil, nil
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(shutdownPollInterval):
			}
		}
	}
	if err := c.domains.Destroy(ctx, name); err != nil {
		// It may have gone off by itself in the meantime.
		if st, serr := c.domains.State(ctx, name); serr == nil && st == virt.StateShutoff {
			return nil, nil
		}
		return nil, err
	}
	return []string{fmt.Sprintf("the guest did not shut down within %s; the domain was powered off", timeout)}, nil
}

func (c *Controller) powerTarget(ctx context.Context, op string, pop part.Op, name string) (store.Instance, *curDomain, error) {
	// Ownership first: another host's instance is refused naming its
	// host, whatever this host's hypervisor mode.
	rec, err := c.OwnRecord(ctx, op, name)
	if err != nil {
		return store.Instance{}, nil, err
	}
	if err := c.drv.require(op, name); err != nil {
		return store.Instance{}, nil, err
	}
	if err := c.CheckRecordParts(ctx, pop, rec); err != nil { // phases.go (a shelved or rescued instance is refused)
		return store.Instance{}, nil, err
	}
	cur, err := c.requireDomain(ctx, name, rec.UUID)
	if err != nil {
		return store.Instance{}, nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return rec, cur, nil
}

// startWithSecrets hands the encrypted disks' passphrases to libvirt and
// starts the domain; a failed start takes them back.
func (c *Controller) startWithSecrets(ctx context.Context, rec store.Instance) (err error) {
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	r := revert.New(c.log, "start "+rec.Name)
	defer r.Fail(&err)
	if err := c.disks.DefineSecrets(ctx, r, in); err != nil {
		return err
	}
	if err := c.parts.BeforeStart(ctx, &part.Instance{Spec: in}, r); err != nil {
		return err
	}
	if err := c.domains.Start(ctx, rec.Name); err != nil {
		return err
	}
	r.Success()
	return nil
}

// EnsureDrive rebuilds rec's config drive from its published document
// when the file is missing (the domain's cdrom points at it); an
// instance with config_drive: false has none.
func (c *Controller) EnsureDrive(ctx context.Context, rec store.Instance) error {
	drive := filepath.Join(c.instanceDir(rec.Name), driveFile)
	if fileExists(drive) {
		return nil
	}
	if in, err := decodeSpec(rec); err == nil && !in.WantsConfigDrive() {
		return nil
	}
	c.log.Warn("config drive missing; rebuilding it from the published metadata", "name", rec.Name)
	if err := os.MkdirAll(filepath.Dir(drive), 0o750); err != nil {
		return err
	}
	doc, err := c.store.Document(ctx, rec.UUID)
	if err != nil {
		return fmt.Errorf("config drive %s: %w", rec.Name, err)
	}
	tree, err := metadata.DecodeTree(doc.Tree)
	if err != nil {
		return fmt.Errorf("config drive %s: %w", rec.Name, err)
	}
	staged := drive + ".staged"
	defer os.Remove(staged)
	if err := configdrive.Build(staged, tree.ConfigDriveFiles(), configdrive.Options{Format: c.driveFmt}); err != nil {
		return fmt.Errorf("config drive %s: %w", rec.Name, err)
	}
	return atomicfile.Rename(staged, drive)
}
