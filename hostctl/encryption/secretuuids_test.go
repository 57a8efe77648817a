package encryption

import (
	"slices"
	"testing"
)

// TestSecretUUIDs: a disk names its own and its backing file's secret;
// an instance's records name each secret once, sorted (two disks may share
// a backing file's copy).
func TestSecretUUIDs(t *testing.T) {
	if got := (BlockDevice{}).SecretUUIDs(); len(got) != 0 {
		t.Errorf("plain disk: %v", got)
	}
	if got := (BlockDevice{EncryptionSecretUUID: "b", BackingEncryptionSecretUUID: "a"}).SecretUUIDs(); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("disk: %v", got)
	}
	bds := BlockDevices{Disks: map[string]BlockDevice{
		"vda": {EncryptionSecretUUID: "c", BackingEncryptionSecretUUID: "a"},
		"vdb": {EncryptionSecretUUID: "b", BackingEncryptionSecretUUID: "a"},
		"vdc": {},
	}}
	if got := bds.SecretUUIDs(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("instance: %v", got)
	}
	if got := (BlockDevices{}).SecretUUIDs(); len(got) != 0 {
		t.Errorf("no disks: %v", got)
	}
}
