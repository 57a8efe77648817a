// Package firmware is the firmware transport as a host part
// (hostctl/part): every publish also hands the instance's guest-facing
// facts to QEMU's firmware configuration device (fw_cfg), which a guest
// reads from its earliest stages of boot without a mount or a network.
//
// The entries (metadata.FirmwareEntries: the latest devices document, the
// uuid, the metadata revision) are cut from the tree the publish rendered
// for the drive and the metadata service, written as files of the
// instance directory (fw_cfg.<revision>.<entry>, atomically, with the
// config drive's permissions), and named in the persistent definition's
// <sysinfo type='fwcfg'>. QEMU reads the files when it starts: a running
// guest keeps the revision it booted with, the next boot gets the newest.
// `hostctl instance show` names the revision each transport carries
// (Transport).
//
// The definition an apply makes already names the entry files of the
// revision it publishes (Prepare): the devices document needs the
// addresses libvirt gives the domain when it defines it, so the files
// cannot be written before the define, but their names do not depend on
// them, and libvirt reads a file only when the domain starts. The publish
// then writes them (Publish) without defining the domain again. A publish
// whose definition names other entries redefines the domain only when
// what they carry changed, and puts the definition back with everything
// else if the store write fails.
package firmware

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/revert"
)

// Domains is what the part asks of libvirt: an instance's domain XML
// (live: the running configuration) and a (re)definition.
type Domains interface {
	XML(ctx context.Context, name string, live bool) ([]byte, error)
	Define(ctx context.Context, domainXML []byte) (virt.Domain, error)
}

// Names are the fw_cfg names of the entries, in the order
// metadata.FirmwareEntries gives them.
var Names = []string{metadata.FirmwareDevices, metadata.FirmwareUUID, metadata.FirmwareRevision}

// FileRE matches the instance directory's firmware entry files
// (fw_cfg.<revision>.<entry>).
var FileRE = regexp.MustCompile(`^fw_cfg\.([0-9]+)\.[a-z]+$`)

// Part is the firmware transport.
type Part struct {
	domains Domains
	dataDir string
	on      bool
	log     *slog.Logger
}

// New returns the firmware part over domains, for the instance
// directories of dataDir (<dataDir>/instances/<name>); on is
// --firmware-metadata: off, a publish takes earlier entries out of the
// persistent definition.
func New(domains Domains, dataDir string, on bool, log *slog.Logger) *Part {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Part{domains: domains, dataDir: dataDir, on: on, log: log}
}

// Name implements part.Part.
func (*Part) Name() string { return "firmware" }

const (
	defineWhy  = "the definition it makes names the entry files of the revision it publishes"
	publishWhy = "its publish writes the entries (or redefines them when what they carry changed)"
)

// Answers implements part.Part.
func (*Part) Answers() part.Answers {
	nothing := part.Answer{Do: part.Nothing}
	return part.Answers{
		part.Apply:            {Do: part.Act, Why: defineWhy},
		part.Start:            {Do: part.Nothing, Why: "QEMU reads the entry files the definition names when it starts"},
		part.Stop:             nothing,
		part.RebootSoft:       {Do: part.Nothing, Why: "the guest keeps what QEMU read at its start"},
		part.RebootHard:       {Do: part.Nothing, Why: "QEMU reads the entry files the definition names when it starts"},
		part.Delete:           {Do: part.Nothing, Why: "the entry files go with the instance directory"},
		part.ForceDelete:      {Do: part.Nothing, Why: "the entry files are the other host's"},
		part.Adopt:            {Do: part.Nothing, Why: "the reconciler republishes an adopted domain's entries when they drift"},
		part.Shelve:           {Do: part.Nothing, Why: "carried: the entries are cut from the published metadata, which stays"},
		part.Unshelve:         {Do: part.Act, Why: publishWhy},
		part.Rescue:           {Do: part.Nothing, Why: "the rescue domain boots the rescue image; the kept definition keeps its entries"},
		part.Unrescue:         {Do: part.Nothing, Why: "the kept definition has its entries"},
		part.Resize:           {Do: part.Act, Why: defineWhy},
		part.Rebuild:          {Do: part.Act, Why: defineWhy},
		part.Snapshot:         nothing,
		part.MigrateCold:      {Do: part.Act, Why: "the destination's apply writes the entries anew (" + defineWhy + ")"},
		part.MigrateLive:      {Do: part.Act, Why: "the destination's republish after the switchover writes the entries anew (" + defineWhy + ")"},
		part.ConfirmMigration: {Do: part.Nothing, Why: "the source's entry files go with its instance directory"},
		part.RevertMigration:  {Do: part.Nothing, Why: "the destination's entry files go with its instance directory"},
		part.Evacuate:         {Do: part.Act, Why: "the new host's apply writes the entries anew (" + defineWhy + ")"},
	}
}

// Check implements part.Part (nothing to refuse).
func (*Part) Check(context.Context, part.Op, *part.Instance) error { return nil }

// Prepare implements part.Part: with the transport on, the definition
// the operation makes names the entry files of in.Revision (the revision
// its publish makes; none when the core does not say), which Publish
// writes. Nothing is written yet: no undo step.
func (p *Part) Prepare(_ context.Context, _ part.Op, in *part.Instance, _ *revert.Reverter, c *part.Contribution) error {
	if !p.on || in.Revision <= 0 {
		return nil
	}
	dir := p.instanceDir(in.Spec.Name)
	for _, n := range Names {
		c.Firmware = append(c.Firmware, part.FirmwareFile{Name: n, File: virt.FirmwareFileName(dir, in.Revision, n)})
	}
	return nil
}

// Devices implements part.Part: the entries are no device.
func (*Part) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart implements part.Part (nothing to do).
func (*Part) AfterStart(context.Context, *part.Instance) error { return nil }

// AfterStop implements part.Part (nothing to do).
func (*Part) AfterStop(context.Context, *part.Instance) error { return nil }

// AfterDelete implements part.Part (nothing to do).
func (*Part) AfterDelete(context.Context, *part.Instance) error { return nil }

func (p *Part) instanceDir(name string) string {
	return filepath.Join(p.dataDir, "instances", name)
}

// Publish implements part.Publisher: it writes the firmware entries of
// tree (revision rev) into the instance directory and names them in the
// persistent definition of the instance's domain, or, with the transport
// off, takes any entries out of it. Each step registers its undo on r. A
// domain libvirt does not have is left alone.
//
// A definition that already names rev's entry files (the apply named them
// when it defined the domain: Prepare) gets its files written, and is not
// defined again. Entries whose content (devices document, uuid) the
// persistent definition already names are left as they are, files and
// definition: a publish that changes nothing the firmware carries
// redefines nothing. Their revision entry then names the revision that
// last changed them, older than the publish's; the guest compares content
// where revisions differ (the agent takes an older revision with the
// devices it applied as current). Once the store write succeeded, commit
// deletes the entry files of every other revision than the one the
// definition names.
func (p *Part) Publish(ctx context.Context, in *part.Instance, tree *metadata.Tree, rev int64, r *revert.Reverter) (func(), error) {
	name := in.Spec.Name
	keep, err := p.set(ctx, r, name, tree, rev)
	if err != nil {
		return nil, err
	}
	return func() { p.prune(name, keep) }, nil
}

// set is Publish's work; it returns the revision whose files the
// definition names (0: none).
func (p *Part) set(ctx context.Context, r *revert.Reverter, name string, tree *metadata.Tree, rev int64) (int64, error) {
	prev, err := p.domains.XML(ctx, name, false)
	if isNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("firmware entries: %w", err)
	}
	have, err := virt.FirmwareFiles(prev)
	if err != nil {
		return 0, err
	}
	if !p.on {
		if len(have) == 0 {
			return 0, nil
		}
		return 0, p.define(ctx, r, name, prev, nil)
	}
	entries, err := metadata.FirmwareEntries(tree)
	if err != nil {
		return 0, err
	}
	dir := p.instanceDir(name)
	named := len(have) == len(entries)
	for i, e := range entries {
		named = named && have[i].Name == e.Name && have[i].File == virt.FirmwareFileName(dir, rev, e.Name)
	}
	if !named && current(have, entries) {
		return virt.FirmwareRevision(have), nil
	}
	files, err := p.write(r, dir, rev, entries)
	if err != nil || named {
		return rev, err
	}
	return rev, p.define(ctx, r, name, prev, files)
}

// write writes entries as the files of revision rev in dir, all at once
// (each is fsynced, renamed into place and its directory fsynced: the
// three wait for the disk together, not one after the other).
func (p *Part) write(r *revert.Reverter, dir string, rev int64, entries []metadata.FirmwareEntry) ([]virt.FirmwareFile, error) {
	files := make([]virt.FirmwareFile, len(entries))
	for i, e := range entries {
		f := virt.FirmwareFileName(dir, rev, e.Name)
		if err := removeFile(f); err != nil { // a leftover of a crash
			return nil, err
		}
		r.Add("remove firmware entry file "+f, func(context.Context) error { return removeFile(f) })
		files[i] = virt.FirmwareFile{Name: e.Name, File: f}
	}
	errs := make([]error, len(entries))
	var wg sync.WaitGroup
	for i, e := range entries {
		wg.Go(func() {
			if err := atomicfile.WriteFile(files[i].File, e.Data, 0o600); err != nil {
				errs[i] = fmt.Errorf("firmware entry %s: %w", e.Name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return files, nil
}

// define redefines the domain from prev with files as its entries and
// registers prev's definition as the undo.
func (p *Part) define(ctx context.Context, r *revert.Reverter, name string, prev []byte, files []virt.FirmwareFile) error {
	next, err := virt.SetFirmware(prev, p.dataDir, files)
	if err != nil {
		return err
	}
	if _, err := p.domains.Define(ctx, next); err != nil {
		return fmt.Errorf("firmware entries: redefine domain %s: %w", name, err)
	}
	r.Add("restore the firmware entries of domain "+name, func(ctx context.Context) error {
		_, err := p.domains.Define(ctx, prev)
		return err
	})
	return nil
}

// current reports whether the entry files a definition names (have)
// carry what entries would, but for the revision entry: the same entries
// in the same order, each file there with the same content. The revision
// entry must be one (the files' names carry it), not necessarily entries'.
func current(have []virt.FirmwareFile, entries []metadata.FirmwareEntry) bool {
	if len(have) != len(entries) || virt.FirmwareRevision(have) <= 0 {
		return false
	}
	for i, e := range entries {
		if have[i].Name != e.Name {
			return false
		}
		b, err := os.ReadFile(have[i].File)
		if err != nil {
			return false
		}
		if e.Name == metadata.FirmwareRevision {
			if n, err := metadata.ParseFirmwareRevision(b); err != nil || n != virt.FirmwareRevision(have) {
				return false
			}
			continue
		}
		if !bytes.Equal(b, e.Data) {
			return false
		}
	}
	return true
}

// Drifted implements part.Publisher: the persistent definition's entries
// disagree with the transport's setting: none while it is on (an
// instance published before it was turned on), of a newer revision than
// the record's, or naming files that are gone; or some while it is off.
// The reason names the setting (the reconciler logs it).
func (p *Part) Drifted(ctx context.Context, in *part.Instance, rev int64) string {
	doc, err := p.domains.XML(ctx, in.Spec.Name, false)
	if err != nil {
		return ""
	}
	files, err := virt.FirmwareFiles(doc)
	if err != nil {
		return ""
	}
	if !p.on {
		if len(files) > 0 {
			return "firmware entries did not match --firmware-metadata (off: the definition has entries)"
		}
		return ""
	}
	for _, f := range files {
		if _, err := os.Stat(f.File); err != nil {
			return "firmware entries did not match --firmware-metadata (an entry's file is gone: QEMU would not start)"
		}
	}
	// An older revision is that of the last publish that changed the
	// entries (Publish); none, or a newer one (a publish that redefined
	// and did not finish), is drift.
	switch fr := virt.FirmwareRevision(files); {
	case fr == 0:
		return "firmware entries did not match --firmware-metadata (on: the definition has none)"
	case fr > rev:
		return fmt.Sprintf("firmware entries did not match --firmware-metadata (revision %d, newer than the stored %d: a publish that did not finish)", fr, rev)
	}
	return ""
}

// prune deletes the instance's firmware entry files of other revisions
// than keep (0: all). QEMU read a running domain's at its start; the
// persistent definition names keep's.
func (p *Part) prune(name string, keep int64) {
	dir := p.instanceDir(name)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		m := FileRE.FindStringSubmatch(e.Name())
		if m == nil || m[1] == strconv.FormatInt(keep, 10) {
			continue
		}
		if err := removeFile(filepath.Join(dir, e.Name())); err != nil {
			p.log.Warn("could not remove an old firmware entry file", "file", e.Name(), "err", err)
		}
	}
}

// Transport implements part.Publisher: which revision the firmware
// carries: the running domain's (what QEMU read at its start, fixed until
// the guest restarts) and the persistent definition's (the next boot).
func (p *Part) Transport(ctx context.Context, in *part.Instance, running bool, stored int64) part.Transport {
	t, err := p.transport(ctx, in.Spec.Name, running)
	if err != nil {
		t.Note = err.Error()
	}
	if stored > 0 && t.NextBoot > 0 && t.NextBoot < stored {
		// Publish leaves entries alone that a publish did not change.
		t.Note += fmt.Sprintf("; the next boot's entries are revision %d's, unchanged since (current)", t.NextBoot)
	}
	return t
}

func (p *Part) transport(ctx context.Context, name string, running bool) (part.Transport, error) {
	t := part.Transport{Name: types.TransportFirmware}
	persistent, err := p.domains.XML(ctx, name, false)
	if err != nil {
		return t, err
	}
	pf, err := virt.FirmwareFiles(persistent)
	if err != nil {
		return t, err
	}
	t.NextBoot = virt.FirmwareRevision(pf)
	if !running {
		t.Revision = t.NextBoot
		if t.Revision == 0 {
			t.Note = "off (hostctl serve --firmware-metadata)"
		}
		return t, nil
	}
	live, err := p.domains.XML(ctx, name, true)
	if err != nil {
		return t, err
	}
	lf, err := virt.FirmwareFiles(live)
	if err != nil {
		return t, err
	}
	t.Revision = virt.FirmwareRevision(lf)
	switch {
	case t.Revision == 0 && t.NextBoot == 0:
		t.Note = "off (hostctl serve --firmware-metadata)"
	case t.Revision == 0:
		t.Note = "none in the running guest (it started before the firmware transport was on); from the next boot"
	default:
		t.Note = "fixed while the guest runs; a restart brings the next boot's"
	}
	return t, nil
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, virt.ErrNotFound) }

// removeFile removes p; a missing file is no error.
func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
