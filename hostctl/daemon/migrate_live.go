package daemon

import (
	"flag"
	"net"
	"strings"

	"github.com/vmeta/vmeta/hostctl/migrate"
)

// Live migration (hostctl/migrate, live.go): with a libvirt connection,
// this host's side of the moves can also migrate live.

func liveMigrationFlags(fs *flag.FlagSet, c *Config) {
	fs.StringVar(&c.MigrationLibvirtURI, "migration-libvirt-uri", "", "this host's libvirtd as other hosts' libvirtd reach it for a live migration to this host (peer to peer); default: --libvirt-uri (qemu:///…?socket=PATH as qemu+unix:///…?socket=PATH); another machine's libvirtd needs a remote URI (qemu+tls://HOST/system)")
	fs.BoolVar(&c.MigrationTLS, "migration-tls", false, "libvirt's migration TLS is configured on the hosts (qemu.conf migrate_tls_x509_cert_dir): live migrations are encrypted (VIR_MIGRATE_TLS), and instances with encrypted disks may move live")
}

// liveHost is this host's side of the moves: a LiveHost over h when
// libvirt is connected, h itself otherwise.
func (s *serve) liveHost(h *migrate.Host) (migrate.Source, migrate.Destination) {
	if s.hv == nil || s.hv.conn == nil || s.disks == nil {
		return h, h
	}
	uri := s.cfg.MigrationLibvirtURI
	if uri == "" {
		uri = peerURI(s.hv.cfg.URI)
	}
	lh := &migrate.LiveHost{Host: h, Virt: s.hv.conn, LibvirtSecrets: s.disks, LUKS: luksTool(s.cfg), Drive: s.ctl.EnsureDrive,
		URI: uri, MigrateURI: migrateURI(s.cfg.MigrationListen), TLS: s.cfg.MigrationTLS}
	return lh, lh
}

// peerURI is uri as another libvirtd opens it: a qemu:// URI without a
// transport would be that libvirtd's own driver, so qemu:///…?socket=
// becomes qemu+unix:///…?socket= (two libvirtds of one machine).
func peerURI(uri string) string {
	if rest, ok := strings.CutPrefix(uri, "qemu:///"); ok && strings.Contains(rest, "socket=") {
		return "qemu+unix:///" + rest
	}
	return uri
}

// migrateURI is where this host's QEMU listens for a migration stream:
// the host of --migration-listen (libvirt picks the port), "" (libvirt's
// choice: this host's name) for a wildcard or no address.
func migrateURI(listen string) string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return ""
	}
	if strings.Contains(host, ":") {
		return "tcp://[" + host + "]"
	}
	return "tcp://" + host
}
