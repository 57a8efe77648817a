// Package configdrive is the config-drive media as a host part
// (hostctl/part): the config drive of a running domain follows every
// publish of its instance.
//
// The core builds each publish's drive into a staged file of the
// instance directory and, once the store write stood, renames it to
// disk.config, the drive the domain's persistent definition names (the
// next boot reads it). A guest reads its config drive whenever it likes
// (vmeta-agent re-reads it on a media change; cloud-init at boot), so the
// file in its cdrom is never written in place: when the domain runs, this
// part links the staged drive as disk.config.<revision> (the instance
// revision the publish creates) and swaps the cdrom's medium for it —
// libvirt's update-device, live and forced, as `virsh change-media
// --update --live --force` does: Linux locks the tray while the drive is
// open, and an unforced change would wait for a guest that never lets go.
// The swap happens before the store write and is undone with everything
// else if that write fails. Once the publish stands, the medium the cdrom
// held before is deleted.
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
//
// The core reaches the part through its phases (ChangeMedium, Transport);
// the after-stop and before-start phases delete the medium files a domain
// that is off no longer needs. Builder (build.go) streams a drive built
// afresh from an instance's published metadata (`hostctl configdrive
// build`). The package imports no controller code.
package configdrive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	drive "github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// DriveFile is the name of the config drive in the instance directory,
// the file the domain's persistent definition names.
const DriveFile = "disk.config"

// MediumFileRE matches the name of a swapped-in medium, disk.config.<N>.
var MediumFileRE = regexp.MustCompile(`^` + regexp.QuoteMeta(DriveFile) + `\.[0-9]+$`)

// NoMediaChangeWarning is the publish warning of a running domain whose
// config drive is a virtio disk.
const NoMediaChangeWarning = "config drive: attached as a virtio disk (--config-drive-bus virtio), which has no medium to change; " +
	"the running guest keeps reading the drive it booted with until it restarts (the metadata service serves the new metadata now)"

// Hypervisor is what the part asks of libvirt: a domain's state and XML
// (live: the running configuration), and a live change of a device (the
// cdrom's medium).
type Hypervisor interface {
	State(ctx context.Context, name string) (virt.State, error)
	XML(ctx context.Context, name string, live bool) ([]byte, error)
	UpdateDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
}

// Part is the config-drive media.
type Part struct {
	hv      Hypervisor
	dataDir string
	log     *slog.Logger
}

var (
	_ part.Part         = (*Part)(nil)
	_ part.MediaChanger = (*Part)(nil)
	_ part.Transporter  = (*Part)(nil)
	_ part.Starter      = (*Part)(nil)
)

// New returns the part over hv (nil: no hypervisor, nothing to swap),
// for the instance directories of dataDir (<dataDir>/instances/<name>).
func New(hv Hypervisor, dataDir string, log *slog.Logger) *Part {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Part{hv: hv, dataDir: dataDir, log: log}
}

// Name implements part.Part.
func (*Part) Name() string { return "configdrive" }

const (
	publishWhy = "its publish puts the rebuilt drive into the running domain's cdrom (ChangeMedium)"
	offWhy     = "the domain is off: its medium files go, the next boot reads disk.config"
)

// Answers implements part.Part.
func (*Part) Answers() part.Answers {
	return part.Answers{
		part.Apply:            {Do: part.Act, Why: publishWhy},
		part.Start:            {Do: part.Act, Why: "medium files a crash left go before the domain starts; it boots from disk.config"},
		part.Stop:             {Do: part.Act, Why: offWhy},
		part.RebootSoft:       {Do: part.Nothing, Why: "the guest keeps the medium in its cdrom"},
		part.RebootHard:       {Do: part.Act, Why: offWhy},
		part.Delete:           {Do: part.Nothing, Why: "the drive and its media go with the instance directory"},
		part.ForceDelete:      {Do: part.Nothing, Why: "the drive and its media are the other host's"},
		part.Adopt:            {Do: part.Nothing, Why: "the core rebuilds a missing drive; the next publish changes the medium"},
		part.Shelve:           {Do: part.Nothing, Why: "the drive and its media go with the instance directory"},
		part.Unshelve:         {Do: part.Act, Why: "the domain starts again from disk.config"},
		part.Rescue:           {Do: part.Nothing, Why: "the rescue domain's publishes change its medium like any running domain's"},
		part.Unrescue:         {Do: part.Nothing, Why: "the kept definition names disk.config"},
		part.Resize:           {Do: part.Act, Why: publishWhy},
		part.Rebuild:          {Do: part.Act, Why: publishWhy},
		part.Snapshot:         {Do: part.Nothing},
		part.MigrateCold:      {Do: part.Act, Why: "the destination's apply builds the drive anew from the published metadata (not copied)"},
		part.MigrateLive:      {Do: part.Act, Why: "the destination builds the drive anew from the published metadata before the switchover (the running cdrom's file must exist there) and republishes it after"},
		part.ConfirmMigration: {Do: part.Nothing, Why: "the source's drive goes with its instance directory"},
		part.RevertMigration:  {Do: part.Nothing, Why: "the destination's drive goes with its instance directory; the source's is as it was"},
		part.Evacuate:         {Do: part.Act, Why: "the new host's apply builds the drive anew from the published metadata; the dead host's goes with its instance directory when it comes back"},
	}
}

// Check implements part.Part (nothing to refuse).
func (*Part) Check(context.Context, part.Op, *part.Instance) error { return nil }

// Prepare implements part.Part: the cdrom itself is the core's (the
// domain names disk.config); nothing to add.
func (*Part) Prepare(context.Context, part.Op, *part.Instance, *revert.Reverter, *part.Contribution) error {
	return nil
}

// Devices implements part.Part: the drive is listed with the disks.
func (*Part) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart implements part.Part (nothing to do).
func (*Part) AfterStart(context.Context, *part.Instance) error { return nil }

// AfterStop implements part.Part: a domain that is off boots from
// disk.config; its medium files go.
func (p *Part) AfterStop(_ context.Context, in *part.Instance) error {
	p.prune(in.Spec.Name, "")
	return nil
}

// AfterDelete implements part.Part (the files go with the instance
// directory).
func (*Part) AfterDelete(context.Context, *part.Instance) error { return nil }

// BeforeStart implements part.Starter: medium files left by a crash go
// before the domain boots from disk.config.
func (p *Part) BeforeStart(_ context.Context, in *part.Instance, _ *revert.Reverter) error {
	p.prune(in.Spec.Name, "")
	return nil
}

func (p *Part) instanceDir(name string) string {
	return filepath.Join(p.dataDir, "instances", name)
}

// mediumFile is the medium a publish creating instance revision rev puts
// into a running domain's cdrom.
func (p *Part) mediumFile(name string, rev int64) string {
	return filepath.Join(p.instanceDir(name), DriveFile+"."+strconv.FormatInt(rev, 10))
}

// ChangeMedium implements part.MediaChanger: it hands staged, the config
// drive the publish of instance name's revision rev built ("" when the
// instance has none), to the instance's domain, before the store write: when it runs, the staged
// drive goes into its cdrom as the medium file of revision rev, with the
// undo steps (the previous medium back, the new file removed) on r. Its
// warnings say when the drive cannot change media. commit runs once the
// write stood and the drive is in place: it deletes the medium files but
// the one in the cdrom (all of them for an instance without a drive).
func (p *Part) ChangeMedium(ctx context.Context, r *revert.Reverter, name, staged string, rev int64) (commit func(), warnings []string, err error) {
	if staged == "" {
		return func() { p.prune(name, "") }, nil, nil
	}
	medium, warnings, err := p.swap(ctx, r, name, staged, rev)
	if err != nil {
		return nil, nil, err
	}
	return func() { p.prune(name, medium) }, warnings, nil
}

// swap puts the staged drive into the cdrom of the instance's domain if
// it runs, as the medium file of revision rev, and registers the undo
// steps. It returns the new medium, "" when nothing was swapped: the
// domain is off and boots from disk.config, or its config drive cannot
// change media, in which case the warnings it returns say so.
func (p *Part) swap(ctx context.Context, r *revert.Reverter, name, staged string, rev int64) (string, []string, error) {
	if p.hv == nil {
		return "", nil, nil
	}
	st, err := p.hv.State(ctx, name)
	if isNotFound(err) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	if st == virt.StateShutoff {
		return "", nil, nil
	}
	cd, err := p.cdrom(ctx, name, true)
	if err != nil {
		return "", nil, err
	}
	if cd == nil {
		p.log.Warn("the running domain has no config drive; it learns of the change from the metadata service only", "name", name)
		return "", nil, nil
	}
	if cd.Device != "cdrom" || cd.Bus != model.DiskBusSATA {
		p.log.Info("config drive is a virtio disk: no media change; the running guest sees the new drive after a restart", "name", name, "device", cd.Device, "bus", cd.Bus)
		return "", []string{NoMediaChangeWarning}, nil
	}
	// The cdrom as the domain has it, whatever --config-drive-bus says now.
	opts := virt.Options{ConfigDriveBus: cd.Bus}

	file := p.mediumFile(name, rev)
	if file == cd.Source { // cannot happen while revisions only grow
		return "", nil, fmt.Errorf("config drive medium %s is already in the cdrom", file)
	}
	host := virt.Host{DataDir: p.dataDir, ConfigDrive: file, ConfigDriveDev: cd.Target}
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
			p.log.Warn("the config drive holds a medium hostctl did not put there; replacing it", "name", name, "medium", cd.Source, "err", err)
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
	if err := p.hv.UpdateDevice(ctx, name, newXML, virt.AffectLive|virt.AffectForce); err != nil {
		// The guest may have powered off meanwhile: it boots from
		// disk.config next time, which the publish replaces.
		if st, serr := p.hv.State(ctx, name); serr == nil && st == virt.StateShutoff {
			p.log.Info("domain stopped during the config drive medium change; it boots from the new disk.config", "name", name)
			return "", nil, removeFile(file)
		}
		return "", nil, fmt.Errorf("change the config drive medium: %w", err)
	}
	if oldXML != nil {
		old := cd.Source
		r.Add("put medium "+old+" back into the config drive", func(ctx context.Context) error {
			return p.hv.UpdateDevice(ctx, name, oldXML, virt.AffectLive|virt.AffectForce)
		})
	}
	p.log.Info("config drive medium changed", "name", name, "medium", file, "previous", cd.Source)
	return file, nil, nil
}

// cdrom is the config drive of the domain's live or persistent XML (nil:
// it has none).
func (p *Part) cdrom(ctx context.Context, name string, live bool) (*virt.DiskInfo, error) {
	doc, err := p.hv.XML(ctx, name, live)
	if err != nil {
		return nil, err
	}
	devs, err := virt.ParseDevices(doc)
	if err != nil {
		return nil, err
	}
	var cd *virt.DiskInfo
	for i, d := range devs.Disks {
		if d.Alias == virt.ConfigDriveAlias {
			cd = &devs.Disks[i]
		}
	}
	return cd, nil
}

// prune deletes the instance's medium files (disk.config.<N>) but keep:
// a domain that is off boots from disk.config, a running one reads the
// medium in its cdrom, keep.
func (p *Part) prune(name, keep string) {
	dir := p.instanceDir(name)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		f := filepath.Join(dir, e.Name())
		if !MediumFileRE.MatchString(e.Name()) || f == keep {
			continue
		}
		if err := removeFile(f); err != nil {
			p.log.Warn("could not remove an old config drive medium", "file", f, "err", err)
		}
	}
}

// Transport implements part.Transporter: which revision the config
// drive carries to the guest of in: the medium in the cdrom of a running domain
// (running: whether it runs), else the drive the next boot reads.
func (p *Part) Transport(ctx context.Context, in *part.Instance, running bool, _ int64) part.Transport {
	t := part.Transport{Name: types.TransportDrive}
	var medium, device string
	if p.hv != nil {
		if cd, err := p.cdrom(ctx, in.Spec.Name, running); err == nil && cd != nil {
			medium, device = cd.Source, cd.Device
		}
	}
	if medium == "" {
		t.Note = "none"
		return t
	}
	rev, err := driveRevision(medium)
	switch {
	case err != nil:
		t.Note = err.Error()
	case running && device != "cdrom":
		// disk.config was replaced since the guest opened it.
		t.NextBoot = rev
		t.Note = "a virtio disk: the running guest reads the drive it booted with; the next boot reads " + filepath.Base(medium)
	default:
		t.Revision, t.NextBoot, t.Note = rev, rev, filepath.Base(medium)
	}
	return t
}

// driveRevision reads the revision of a config drive image.
func driveRevision(path string) (int64, error) {
	tree, _, err := drive.Read(path)
	if err != nil {
		return 0, err
	}
	rev := metadata.TreeRevision(tree)
	if rev == 0 {
		return 0, errors.New(filepath.Base(path) + " carries no revision")
	}
	return rev, nil
}

// linkOrCopy makes dst a hard link of src, or a copy where the file system
// has no hard links; either way dst appears whole or not at all. dst must
// not exist (an error wrapping fs.ErrExist).
func linkOrCopy(src, dst string) error {
	err := os.Link(src, dst)
	switch {
	case err == nil:
		return atomicfile.SyncDir(filepath.Dir(dst))
	case errors.Is(err, fs.ErrExist):
		return err
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
	s, err := atomicfile.Stage(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*", fi.Mode().Perm())
	if err != nil {
		return err
	}
	defer s.Abort()
	if _, err := io.Copy(s.File(), in); err != nil {
		return err
	}
	return s.CommitExclusive(dst)
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, virt.ErrNotFound) }

// removeFile removes f; a missing file is no error.
func removeFile(f string) error {
	if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
