package virt

import (
	"strings"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"
)

func TestRewritePaths(t *testing.T) {
	doc := `<domain><devices><disk><source file='/a/data/instances/vm/disk-vdb.qcow2'/></disk>` +
		`<disk><source file="/a/data/instances/vm/disk.config"/></disk><serial><log file='/a/data/instances/vm/console.log'/></serial>` +
		`<fw_cfg><entry name='opt/x' file='/a/data/instances/vm/fw_cfg.1.devices'/></fw_cfg>` +
		`<kernel>/a/data2/vmlinuz</kernel><other file='/a/database'/></devices></domain>`
	got := string(RewritePaths([]byte(doc), map[string]string{"/a/data": "/b/d"}))
	for _, want := range []string{"'/b/d/instances/vm/disk-vdb.qcow2'", `"/b/d/instances/vm/disk.config"`, "'/b/d/instances/vm/console.log'", "'/b/d/instances/vm/fw_cfg.1.devices'"} {
		if !strings.Contains(got, want) {
			t.Errorf("rewritten XML lacks %s:\n%s", want, got)
		}
	}
	for _, keep := range []string{"/a/data2/vmlinuz", "'/a/database'"} {
		if !strings.Contains(got, keep) {
			t.Errorf("a path outside the data directory changed (%s):\n%s", keep, got)
		}
	}
	if strings.Contains(got, "/a/data/") {
		t.Errorf("a path under the source's data directory stays:\n%s", got)
	}
}

func TestMigrationFlags(t *testing.T) {
	base := libvirt.MigrateLive | libvirt.MigratePeer2peer | libvirt.MigratePersistDest | libvirt.MigrateUndefineSource
	for _, c := range []struct {
		m    Migration
		want libvirt.DomainMigrateFlags
	}{
		{Migration{}, base},
		{Migration{Storage: StorageAll}, base | libvirt.MigrateNonSharedDisk},
		{Migration{Storage: StorageIncremental, TLS: true}, base | libvirt.MigrateNonSharedInc | libvirt.MigrateTLS},
	} {
		if got := c.m.Flags(); got != c.want {
			t.Errorf("%+v: flags %#x, want %#x", c.m, got, c.want)
		}
	}
	p := Migration{MigrateURI: "tcp://127.0.0.1", DestXML: []byte("<domain/>"), Disks: []string{"vda", "vdb"}}.params()
	var names []string
	for _, x := range p {
		names = append(names, x.Field)
	}
	if strings.Join(names, ",") != "migrate_uri,destination_xml,persistent_xml,migrate_disks,migrate_disks" {
		t.Errorf("params: %v", names)
	}
}
