package images

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

var goldenImage = types.Image{
	Name: "cirros-enc", File: "cirros-enc.qcow2", Format: "qcow2", VirtualSize: 117440512, Size: 21430272,
	Encrypted: true, Checksum: "c4110030e2edf06db87f5b6e4efc27300977683d53f040996d6dcc9d8f3f08b7",
	Properties: map[string]string{"hw_ephemeral_encryption": "true", "os_encrypt_key_id": "0b1e8a9a-6f0e-4d8c-9b0b-6e2c1f9f7a11"},
	Created:    time.Date(2026, 11, 26, 11, 0, 0, 0, time.UTC),
}

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

func TestStoredSidecarGolden(t *testing.T) {
	got, err := json.MarshalIndent(goldenImage, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if want := golden(t, "sidecar.v1.json", got); string(got) != string(want) {
		t.Errorf("stored sidecar format changed:\n got %s\nwant %s", got, want)
	}
}
