package encryption_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

var update = flag.Bool("update", false, "rewrite the golden stored formats in testdata")

func golden(t *testing.T, name string, got []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	return want
}

// The controller's block-device record as of this commit
// (hostctl/controller/encryption.go blockDevRecord).
type blockDevRecord struct {
	Instance string                       `json:"instance"`
	Host     string                       `json:"host,omitempty"`
	Disks    map[string]types.BlockDevice `json:"disks"`
}

func TestStoredBlockDevicesGolden(t *testing.T) {
	slot := 1
	rec := blockDevRecord{Instance: "web-1", Host: "h1", Disks: map[string]types.BlockDevice{
		"vda": {Disk: "vda", Encrypted: true, EncryptionSecretUUID: "6f1c2a56-0d3e-4c2b-9a57-2b1f3c4d5e6f",
			BackingEncryptionSecretUUID: "7a2d3b67-1e4f-4d3c-8b68-3c2e4d5f6a7b", EncryptionFormat: "luks",
			EncryptionOptions: map[string]string{"cipher": "aes-256", "mode": "xts", "hash": "sha256", "ivgen": "plain64", "key_size": "512"},
			Created:           time.Date(2026, 11, 26, 11, 0, 0, 0, time.UTC),
			KeyGeneration:     2, KeySlot: &slot, KeyRotation: &types.DiskKeyRotation{Generation: 3, Slot: 0}},
		"vdb": {Disk: "vdb"},
	}}
	got, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if want := golden(t, "blockdevices.v1.json", got); string(got) != string(want) {
		t.Errorf("stored block-device format changed:\n got %s\nwant %s", got, want)
	}
}
