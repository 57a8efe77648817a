package virt

import (
	"context"
	"fmt"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
)

// Live migration through libvirt's own migration (issue 24 item 2;
// hostctl/migrate, live.go): the source libvirtd drives it peer to peer,
// connecting to the destination libvirtd itself, with the disks that are
// not shared copied by libvirt (NBD) into files made on the destination
// beforehand.

// Storage is how a live migration copies the domain's disks.
type Storage int

// The storage copies.
const (
	// StorageShared: the disks are where the destination reads them
	// already; nothing is copied.
	StorageShared Storage = iota
	// StorageAll copies every writable disk whole
	// (VIR_MIGRATE_NON_SHARED_DISK).
	StorageAll
	// StorageIncremental copies the top layer of each writable disk; its
	// backing file must exist on the destination
	// (VIR_MIGRATE_NON_SHARED_INC).
	StorageIncremental
)

// Migration is a live migration's request.
type Migration struct {
	// DestURI is the destination libvirtd's URI as the source libvirtd
	// reaches it (peer to peer).
	DestURI string
	// MigrateURI is where the destination QEMU listens for the
	// migration stream (tcp://HOST[:PORT]); "" lets libvirt choose.
	MigrateURI string
	// DestXML is the domain as the destination defines and runs it (its
	// own file paths); "" keeps the source's.
	DestXML []byte
	// Disks are the targets (vda…) libvirt copies; nil: every writable
	// disk.
	Disks   []string
	Storage Storage
	// TLS encrypts the migration stream, memory and disk blocks
	// (VIR_MIGRATE_TLS: both libvirtds need their migration TLS
	// certificates, qemu.conf migrate_tls_x509_cert_dir).
	TLS bool
}

// Flags are the libvirt flags of m: live, peer to peer, persistent on
// the destination, undefined on the source once it is done.
func (m Migration) Flags() libvirt.DomainMigrateFlags {
	f := libvirt.MigrateLive | libvirt.MigratePeer2peer | libvirt.MigratePersistDest | libvirt.MigrateUndefineSource
	switch m.Storage {
	case StorageAll:
		f |= libvirt.MigrateNonSharedDisk
	case StorageIncremental:
		f |= libvirt.MigrateNonSharedInc
	}
	if m.TLS {
		f |= libvirt.MigrateTLS
	}
	return f
}

// params are the typed parameters of m (virDomainMigrateToURI3's).
func (m Migration) params() []libvirt.TypedParam {
	var p []libvirt.TypedParam
	str := func(k, v string) {
		p = append(p, libvirt.TypedParam{Field: k, Value: *libvirt.NewTypedParamValueString(v)})
	}
	if m.MigrateURI != "" {
		str("migrate_uri", m.MigrateURI)
	}
	if len(m.DestXML) > 0 {
		str("destination_xml", string(m.DestXML))
		str("persistent_xml", string(m.DestXML))
	}
	for _, d := range m.Disks {
		str("migrate_disks", d)
	}
	return p
}

// MigratableXML is the running domain's XML as a migration carries it
// (VIR_DOMAIN_XML_MIGRATABLE): the base of the destination's XML.
func (c *Conn) MigratableXML(ctx context.Context, name string) ([]byte, error) {
	var s string
	err := c.withDomain(ctx, "get the migratable XML of", name, func(l *libvirt.Libvirt, d libvirt.Domain) (err error) {
		s, err = l.DomainGetXMLDesc(d, libvirt.DomainXMLMigratable|libvirt.DomainXMLSecure)
		return err
	})
	return []byte(s), err
}

// Migrate moves the running domain name to m.DestURI, live, and returns
// once libvirt is done: the domain then runs (and is defined) on the
// destination and is gone from here; when it fails the domain runs here
// still (libvirt's own migration either completes or leaves the source
// running).
func (c *Conn) Migrate(ctx context.Context, name string, m Migration) error {
	if m.DestURI == "" {
		return fmt.Errorf("migrate domain %s: no destination URI", name)
	}
	return c.withDomain(ctx, "migrate", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		_, err := l.DomainMigratePerform3Params(d, libvirt.OptString{m.DestURI}, m.params(), nil, m.Flags())
		if err != nil {
			return fmt.Errorf("to %s: %w", m.DestURI, err)
		}
		return nil
	})
}

// RewritePaths returns domain XML doc with every path under each key of
// dirs moved under its value (a source host's data directory to the
// destination's): the destination's XML of a live migration.
func RewritePaths(doc []byte, dirs map[string]string) []byte {
	s := string(doc)
	for from, to := range dirs {
		if from == "" || from == to {
			continue
		}
		from, to = strings.TrimSuffix(from, "/")+"/", strings.TrimSuffix(to, "/")+"/"
		s = strings.NewReplacer("'"+from, "'"+to, "\""+from, "\""+to, ">"+from, ">"+to, "="+from, "="+to).Replace(s)
	}
	return []byte(s)
}
