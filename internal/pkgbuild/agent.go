package pkgbuild

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/files"
)

// sourceOffer is the GPL-3.0 source offer of the agent binary
// (guest/README.md, "License and distribution of the binary").
const sourceOffer = `The vmeta-agent binary statically links github.com/pilebones/go-udev,
licensed under the GNU GPL version 3, and is therefore a combined work
distributed under the GNU General Public License version 3
(/usr/share/common-licenses/GPL-3 on Debian). vmeta's own code is under the
Apache License 2.0, which is compatible with it.

Complete corresponding source: the vmeta repository at
` + Homepage + ` at the commit %s, with
the module versions pinned in its go.sum. ` + "`make package`" + ` writes
vmeta-%s-source.tar.gz (the commit with ` + "`go mod vendor`" + `) next to
this package; whoever distributes this package must distribute that archive
with it, or a written offer, valid for at least three years, to give anyone
the same source on request.
`

func agentInfo(in Inputs, format, version, work string) (*nfpm.Info, error) {
	bin := filepath.Join(in.Bin, "vmeta-agent")
	ls, err := Licenses(bin, in.Root, in.ModCache, in.GoRoot)
	if err != nil {
		return nil, err
	}
	dist := filepath.Join(in.Root, "guest", "dist")
	info := common(in, "vmeta-agent", version, "vmeta guest agent: device role tags, by-tag links and virtiofs shares",
		`vmeta-agent reads the instance's device metadata (Nova's meta_data.json
devices list, from a config-2 config drive or the metadata service at
169.254.169.254) and turns it into udev properties (VMETA_TAGS,
VMETA_ENCRYPTED), /dev/disk/by-tag/ links, alternative names of network
interfaces and mounted virtiofs shares, so that applications find their
devices by role.`+"\n.\n"+`The systemd unit runs it early in boot (before local-fs-pre.target), and
a udev rule starts it when a config drive appears; a cloud-init hook
applies the metadata in images without the unit.`)
	info.Recommends = []string{"udev"}
	if format == "deb" {
		info.Depends = []string{"init-system-helpers (>= 1.54~)"}
	}
	offer := fmt.Sprintf(sourceOffer, in.Describe, version)
	c := files.Contents{
		file(bin, "/usr/bin/vmeta-agent", 0o755, in.MTime),
		file(filepath.Join(dist, "systemd", "vmeta-agent.service"), systemdDir(format)+"/vmeta-agent.service", 0o644, in.MTime),
		file(filepath.Join(dist, "udev", "99-vmeta-agent.rules"), udevDir(format)+"/99-vmeta-agent.rules", 0o644, in.MTime),
		config(filepath.Join(dist, "cloud-init", "99-vmeta-agent.cfg"), "/etc/cloud/cloud.cfg.d/99-vmeta-agent.cfg", in.MTime),
	}
	gen, err := generate(in, work, manPage("vmeta-agent", "vmeta-agent", "8", "man"))
	if err != nil {
		return nil, err
	}
	c = append(c, gen...)
	docs, err := docFiles(work, "vmeta-agent", format, version, in)
	if err != nil {
		return nil, err
	}
	c = append(c, docs...)
	switch format {
	case "deb":
		p := filepath.Join(work, "agent.copyright")
		hdr := "vmeta-agent " + version + "\nUpstream: " + Homepage + "\n\n" + offer
		if err := os.WriteFile(p, []byte(debCopyright(hdr, ls)), 0o644); err != nil {
			return nil, err
		}
		c = append(c, file(p, "/usr/share/doc/vmeta-agent/copyright", 0o644, in.MTime))
		ov, err := lintianOverrides(work, "vmeta-agent", []string{"/usr/bin/vmeta-agent"}, in.MTime)
		if err != nil {
			return nil, err
		}
		c = append(c, ov)
		info.Scripts = nfpm.Scripts{
			PostInstall: filepath.Join(dist, "deb", "postinst"),
			PreRemove:   filepath.Join(dist, "deb", "prerm"),
			PostRemove:  filepath.Join(dist, "deb", "postrm"),
		}
	case "rpm":
		ldir := filepath.Join(work, "licenses")
		if err := os.MkdirAll(ldir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(ldir, "SOURCE-OFFER"), []byte(offer), 0o644); err != nil {
			return nil, err
		}
		names, err := rpmLicenseFiles(ldir, ls)
		if err != nil {
			return nil, err
		}
		for _, n := range append([]string{"SOURCE-OFFER"}, names...) {
			f := file(filepath.Join(ldir, n), "/usr/share/licenses/vmeta-agent/"+n, 0o644, in.MTime)
			f.Type = files.TypeRPMLicense
			c = append(c, f)
		}
		// License is an RPM header (in a deb it would be an unknown
		// control field; the copyright file says it there).
		info.License = "GPL-3.0-only"
		// The summary is its own header in an RPM: the description is
		// the rest.
		info.RPM.Summary, info.Description, _ = strings.Cut(info.Description, "\n")
		info.RPM.Group = "System Environment/Daemons"
		info.RPM.Packager = in.Maintainer
		info.RPM.BuildHost = "vmeta"
		info.Release = "1"
		info.Scripts = nfpm.Scripts{
			PostInstall: filepath.Join(dist, "rpm", "post"),
			PreRemove:   filepath.Join(dist, "rpm", "preun"),
			PostRemove:  filepath.Join(dist, "rpm", "postun"),
		}
	default:
		return nil, fmt.Errorf("format %q: the agent is packaged as deb or rpm", format)
	}
	info.Contents = c
	return info, nil
}
