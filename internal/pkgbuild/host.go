package pkgbuild

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/files"
)

func hostInfo(in Inputs, format, version, work string) (*nfpm.Info, error) {
	if format != "deb" {
		return nil, fmt.Errorf("format %q: the host package is built as deb", format)
	}
	hostctl := filepath.Join(in.Bin, "hostctl")
	replica := filepath.Join(in.Bin, "vmeta-metadata")
	var ls []License
	seen := map[string]bool{}
	for _, b := range []string{hostctl, replica} {
		l, err := Licenses(b, in.Root, in.ModCache, in.GoRoot)
		if err != nil {
			return nil, err
		}
		for _, x := range l {
			if k := x.Component + "/" + x.File; !seen[k] {
				seen[k] = true
				ls = append(ls, x)
			}
		}
	}
	dist := filepath.Join(in.Root, "hostctl", "dist")
	info := common(in, "vmeta-host", version, "vmeta host controller and metadata service for libvirt/KVM hosts",
		`hostctl runs the instances of a libvirt/KVM host from instance specs and
gives their guests what a cloud gives its instances: a Nova-compatible
metadata service and config-2 config drive with device role tags, encrypted
disk flags and virtiofs shares, which cloud-init and vmeta-agent read.`+"\n.\n"+`vmeta-metadata serves the same metadata from a shared Redis store, for
many hosts and replicas.`)
	info.Depends = []string{"libvirt-daemon-system", "qemu-utils", "init-system-helpers (>= 1.54~)"}
	info.Recommends = []string{"qemu-system-x86", "dnsmasq-base", "dnsmasq-utils", "iptables"}
	info.Suggests = []string{"redis-server", "vmeta-agent"}
	p := filepath.Join(work, "host.copyright")
	hdr := "vmeta-host " + version + "\nUpstream: " + Homepage + " (commit " + in.Describe + ")\n\n" +
		"hostctl and vmeta-metadata are licensed under the Apache License 2.0\n(/usr/share/common-licenses/Apache-2.0).\n"
	if err := os.WriteFile(p, []byte(debCopyright(hdr, ls)), 0o644); err != nil {
		return nil, err
	}
	sd := systemdDir(format)
	// What the package installs from the tree: add a file here.
	c := files.Contents{
		file(hostctl, "/usr/bin/hostctl", 0o755, in.MTime),
		file(replica, "/usr/bin/vmeta-metadata", 0o755, in.MTime),
		file(filepath.Join(dist, "systemd", "hostctl.service"), sd+"/hostctl.service", 0o644, in.MTime),
		file(filepath.Join(dist, "systemd", "vmeta-metadata.service"), sd+"/vmeta-metadata.service", 0o644, in.MTime),
		config(filepath.Join(dist, "default", "hostctl"), "/etc/default/hostctl", in.MTime),
		config(filepath.Join(dist, "default", "vmeta-metadata"), "/etc/default/vmeta-metadata", in.MTime),
		// The configuration file hostctl.service runs serve with
		// (--config): every key commented out, at its default.
		config(filepath.Join(dist, "hostctl.yaml"), "/etc/vmeta/hostctl.yaml", in.MTime),
		file(p, "/usr/share/doc/vmeta-host/copyright", 0o644, in.MTime),
		// The Grafana dashboard and the Prometheus alert rules
		// (docs/operators.md, "Alerts and runbooks").
		file(filepath.Join(dist, "grafana", "vmeta.json"), "/usr/share/vmeta/grafana/vmeta.json", 0o644, in.MTime),
		file(filepath.Join(dist, "prometheus", "vmeta.rules.yml"), "/usr/share/vmeta/prometheus/vmeta.rules.yml", 0o644, in.MTime),
		file(filepath.Join(in.Root, "hostctl", "api", "openapi.yaml"), "/usr/share/vmeta/openapi.yaml", 0o644, in.MTime), // the admin API's OpenAPI description
	}
	// What the binaries print about themselves: add a page or script here.
	gen, err := generate(in, work,
		manPage("hostctl", "hostctl", "1", "man", "hostctl"),
		manPage("hostctl", "hostctl.yaml", "5", "man", "hostctl.yaml"),
		manPage("vmeta-metadata", "vmeta-metadata", "8", "man"),
		generated{Bin: "hostctl", Args: []string{"completion", "bash"}, Dst: "/usr/share/bash-completion/completions/hostctl"},
		generated{Bin: "hostctl", Args: []string{"completion", "zsh"}, Dst: "/usr/share/zsh/vendor-completions/_hostctl"},
		generated{Bin: "hostctl", Args: []string{"completion", "fish"}, Dst: "/usr/share/fish/vendor_completions.d/hostctl.fish"},
	)
	if err != nil {
		return nil, err
	}
	c = append(c, gen...)
	docs, err := docFiles(work, "vmeta-host", format, version, in)
	if err != nil {
		return nil, err
	}
	ov, err := lintianOverrides(work, "vmeta-host", []string{"/usr/bin/hostctl", "/usr/bin/vmeta-metadata"}, in.MTime)
	if err != nil {
		return nil, err
	}
	// /var/lib/vmeta is made 0700 by postinst (a packaged directory
	// should be 0755 for lintian) and removed on purge.
	info.Contents = append(append(c, docs...), ov)
	info.Scripts = nfpm.Scripts{
		PostInstall: filepath.Join(dist, "deb", "postinst"),
		PreRemove:   filepath.Join(dist, "deb", "prerm"),
		PostRemove:  filepath.Join(dist, "deb", "postrm"),
	}
	return info, nil
}
