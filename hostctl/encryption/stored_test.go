package encryption_test

import (
	"encoding/json"
	"flag"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden stored formats in testdata")

func goldenBlockDevices() encryption.BlockDevices {
	slot := 1
	return encryption.BlockDevices{Instance: "web-1", Host: "h1", Disks: map[string]encryption.BlockDevice{
		"vda": {Disk: "vda", Encrypted: true, EncryptionSecretUUID: "6f1c2a56-0d3e-4c2b-9a57-2b1f3c4d5e6f",
			BackingEncryptionSecretUUID: "7a2d3b67-1e4f-4d3c-8b68-3c2e4d5f6a7b", EncryptionFormat: "luks",
			EncryptionOptions: map[string]string{"cipher": "aes-256", "mode": "xts", "hash": "sha256", "ivgen": "plain64", "key_size": "512"},
			Created:           time.Date(2026, 11, 26, 11, 0, 0, 0, time.UTC),
			KeyGeneration:     2, KeySlot: &slot, KeyRotation: &encryption.DiskKeyRotation{Generation: 3, Slot: 0}},
		"vdb": {Disk: "vdb"},
	}}
}

var blockDevicesFormat = testenv.Stored[encryption.BlockDevices]{
	Golden: filepath.Join("testdata", "blockdevices.v1.json"),
	Encode: encryption.EncodeBlockDevices, Decode: encryption.DecodeBlockDevices,
}

func TestStoredBlockDevicesGolden(t *testing.T) {
	blockDevicesFormat.CheckGolden(t, goldenBlockDevices(), *update)
}

// TestStoredBlockDevicesReads: a record as the controller wrote it before
// the stored format had its own struct (testdata/blockdevices.v1.json,
// written then, as a map of the wire type) still reads, whole.
func TestStoredBlockDevicesReads(t *testing.T) {
	b := blockDevicesFormat.CheckReads(t, goldenBlockDevices())
	// By hand, too: the record's JSON is its stored format.
	var byHand encryption.BlockDevices
	if err := json.Unmarshal(b, &byHand); err != nil || !reflect.DeepEqual(byHand, goldenBlockDevices()) {
		t.Errorf("json.Unmarshal: %+v, %v", byHand, err)
	}
	if again, err := json.Marshal(byHand); err != nil || string(again) != string(b) {
		t.Errorf("json.Marshal: %s, %v; want %s", again, err, b)
	}
	got, err := encryption.DecodeBlockDevices([]byte(`{"instance":"a"}`))
	if err != nil || got.Disks == nil {
		t.Errorf("a record without disks: %+v, %v; want an empty map", got, err)
	}
	if _, err := encryption.DecodeBlockDevices([]byte(`{"disks": []}`)); err == nil {
		t.Error("a record with a list for disks decoded")
	}
}

// TestStoredBlockDevicesKeepEveryField: every field of the records
// survives the stored format; a field added to BlockDevice and not to
// blockDeviceV1 fails here.
func TestStoredBlockDevicesKeepEveryField(t *testing.T) {
	blockDevicesFormat.CheckRoundTrip(t, testenv.Filled[encryption.BlockDevices](t))
}
