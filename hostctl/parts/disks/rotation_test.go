package disks_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// TestHostBlockDevices: the part lists the block-device records of this
// host's instances (as the disk passphrase rotator reads them), by
// instance UUID, with what SetBlockDevice wrote; another host's record is
// left out, and one that cannot be decoded is left out and named in the
// error.
func TestHostBlockDevices(t *testing.T) {
	ctx := context.Background()
	f := newFakeCore(t)
	p := f.part()
	recs := f.st.(store.Records)
	web := &model.Instance{Name: "web", UUID: keys.NewUUID()}
	db := &model.Instance{Name: "db", UUID: keys.NewUUID()}
	sec := keys.NewUUID()
	if err := p.SetBlockDevice(ctx, web, encryption.BlockDevice{Disk: "vda", Encrypted: true, EncryptionSecretUUID: sec, EncryptionFormat: encryption.FormatLUKS}); err != nil {
		t.Fatal(err)
	}
	if err := p.SetBlockDevice(ctx, db, encryption.BlockDevice{Disk: "vdb"}); err != nil {
		t.Fatal(err)
	}
	other, err := encryption.EncodeBlockDevices(encryption.BlockDevices{Instance: "far", Host: "h2",
		Disks: map[string]encryption.BlockDevice{"vda": {Disk: "vda"}}})
	if err != nil {
		t.Fatal(err)
	}
	otherUUID, badUUID := keys.NewUUID(), keys.NewUUID()
	if _, err := recs.PutRecord(ctx, "blockdev/"+otherUUID, other, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := recs.PutRecord(ctx, "blockdev/"+badUUID, []byte("not a record"), 0); err != nil {
		t.Fatal(err)
	}

	got, err := p.HostBlockDevices(ctx)
	if err == nil || !strings.Contains(err.Error(), "blockdev/"+badUUID) {
		t.Errorf("error %v, want one naming blockdev/%s", err, badUUID)
	}
	if ids, want := slices.Sorted(maps.Keys(got)), slices.Sorted(slices.Values([]string{web.UUID, db.UUID})); !slices.Equal(ids, want) {
		t.Fatalf("instances %v, want this host's %v", ids, want)
	}
	if bd := got[web.UUID].Disks["vda"]; got[web.UUID].Instance != "web" || !bd.Encrypted || bd.EncryptionSecretUUID != sec {
		t.Errorf("web's record %+v", got[web.UUID])
	}
	if _, ok := got[db.UUID].Disks["vdb"]; !ok || got[db.UUID].Host != "h1" {
		t.Errorf("db's record %+v", got[db.UUID])
	}

	// Without a hypervisor there is no libvirt secret to update.
	if updated, err := p.UpdateLibvirtSecret(ctx, web, "vda", keys.NewUUID(), []byte("pass")); updated || err != nil {
		t.Errorf("UpdateLibvirtSecret without libvirt = %t, %v; want false, nil", updated, err)
	}
}
