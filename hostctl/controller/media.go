package controller

// The config drive of a running domain follows every publish.
//
// A guest reads its config drive whenever it likes (vmeta-agent re-reads
// it on a media change; cloud-init at boot), so the file in its cdrom is
// never written in place. Each publish builds the drive into a staged
// file; when the domain runs, the staged drive is linked as
// disk.config.<revision> (the instance revision the publish creates), and
// the cdrom's medium is swapped for it — libvirt's update-device, live and
// forced, as `virsh change-media --update --live --force` does: Linux
// locks the tray while the drive is open, and an unforced change would
// wait for a guest that never lets go. The swap happens before the store
// write and is undone with everything else if that write fails. After the
// commit disk.config is replaced by the same file (rename, atomic), and
// the medium the cdrom held before is deleted.
//
//	disk.config       the current drive; the domain's persistent
//	                  definition names it, so the next boot reads it
//	disk.config.<N>   the medium in the running domain's cdrom (the same
//	                  file as disk.config, hard-linked, until the next
//	                  publish); gone once the domain is off again
//
// A virtio config drive (hostctl serve --config-drive-bus virtio) has no
// removable medium: a running guest keeps the drive it booted with until
// it restarts and learns of changes from the metadata service only. The
// publish says so in its warnings.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// mediumFileRE matches the name of a swapped-in medium, disk.config.<N>.
var mediumFileRE = regexp.MustCompile(`^` + regexp.QuoteMeta(driveFile) + `\.[0-9]+$`)

// mediumFile is the medium a publish creating instance revision rev puts
// into a running domain's cdrom.
func (c *Controller) mediumFile(name string, rev int64) string {
	return filepath.Join(c.instanceDir(name), driveFile+"."+strconv.FormatInt(rev, 10))
}

// noMediaChangeWarning is the publish warning of a running domain whose
// config drive is a virtio disk.
const noMediaChangeWarning = "config drive: attached as a virtio disk (--config-drive-bus virtio), which has no medium to change; " +
	"the running guest keeps reading the drive it booted with until it restarts (the metadata service serves the new metadata now)"

// swapMedium puts the staged drive into the cdrom of the instance's
// domain if it runs, as the medium file of revision rev, and registers
// the undo steps (the previous medium back, the new file removed). It
// returns the new medium, "" when nothing was swapped: the domain is off
// and boots from disk.config, or its config drive cannot change media, in
// which case the warnings it returns say so.
func (c *Controller) swapMedium(ctx context.Context, r *revert.Reverter, name, staged string, rev int64) (string, []string, error) {
	st, err := c.domains.State(ctx, name)
	if isNotFound(err) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	if st == virt.StateShutoff {
		return "", nil, nil
	}
	doc, err := c.domains.XML(ctx, name, true)
	if err != nil {
		return "", nil, err
	}
	devs, err := virt.ParseDevices(doc)
	if err != nil {
		return "", nil, err
	}
	var cd *virt.DiskInfo
	for i, d := range devs.Disks {
		if d.Alias == virt.ConfigDriveAlias {
			cd = &devs.Disks[i]
		}
	}
	if cd == nil {
		c.log.Warn("the running domain has no config drive; it learns of the change from the metadata service only", "name", name)
		return "", nil, nil
	}
	if cd.Device != "cdrom" || cd.Bus != model.DiskBusSATA {
		c.log.Info("config drive is a virtio disk: no media change; the running guest sees the new drive after a restart", "name", name, "device", cd.Device, "bus", cd.Bus)
		return "", []string{noMediaChangeWarning}, nil
	}
	// The cdrom as the domain has it, whatever --config-drive-bus says now.
	opts := c.dom
	opts.ConfigDriveBus = cd.Bus

	file := c.mediumFile(name, rev)
	if file == cd.Source { // cannot happen while revisions only grow
		return "", nil, fmt.Errorf("config drive medium %s is already in the cdrom", file)
	}
	host := virt.Host{DataDir: c.dataDir, ConfigDrive: file, ConfigDriveDev: cd.Target}
	newXML, err := virt.ConfigDriveMediaXML(host, opts)
	if err != nil {
		return "", nil, err
	}
	var oldXML []byte
	if cd.Source != "" {
		host.ConfigDrive = cd.Source
		if oldXML, err = virt.ConfigDriveMediaXML(host, opts); err != nil {
			// A medium hostctl did not put there (outside the data
			// directory): it is replaced, and not put back on failure.
			c.log.Warn("the config drive holds a medium hostctl did not put there; replacing it", "name", name, "medium", cd.Source, "err", err)
			oldXML = nil
		}
	}
	if err := removeFile(file); err != nil { // a leftover of a crash
		return "", nil, err
	}
	r.Add("remove config drive medium "+file, func(context.Context) error { return removeFile(file) })
	if err := linkOrCopy(staged, file); err != nil {
		return "", nil, fmt.Errorf("config drive medium: %w", err)
	}
	if err := c.hotplug.UpdateDevice(ctx, name, newXML, virt.AffectLive|virt.AffectForce); err != nil {
		// The guest may have powered off meanwhile: it boots from
		// disk.config next time, which the publish replaces.
		if st, serr := c.domains.State(ctx, name); serr == nil && st == virt.StateShutoff {
			c.log.Info("domain stopped during the config drive medium change; it boots from the new disk.config", "name", name)
			return "", nil, removeFile(file)
		}
		return "", nil, fmt.Errorf("change the config drive medium: %w", err)
	}
	if oldXML != nil {
		old := cd.Source
		r.Add("put medium "+old+" back into the config drive", func(ctx context.Context) error {
			return c.hotplug.UpdateDevice(ctx, name, oldXML, virt.AffectLive|virt.AffectForce)
		})
	}
	c.log.Info("config drive medium changed", "name", name, "medium", file, "previous", cd.Source)
	return file, nil, nil
}

// pruneMedia deletes the instance's medium files (disk.config.<N>) but
// keep: a domain that is off boots from disk.config, a running one reads
// the medium in its cdrom, keep.
func (c *Controller) pruneMedia(name, keep string) {
	dir := c.instanceDir(name)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if !mediumFileRE.MatchString(e.Name()) || p == keep {
			continue
		}
		if err := removeFile(p); err != nil {
			c.log.Warn("could not remove an old config drive medium", "file", p, "err", err)
		}
	}
}

// linkOrCopy makes dst a hard link of src, or a copy where the file system
// has no hard links. dst must not exist.
func linkOrCopy(src, dst string) (err error) {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(dst)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return errors.Join(out.Sync(), out.Close())
}
