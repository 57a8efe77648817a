package images

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden stored formats in testdata")

var goldenImage = Image{
	Name: "cirros-enc", File: "cirros-enc.qcow2", Format: "qcow2", VirtualSize: 117440512, Size: 21430272,
	Encrypted: true, Checksum: "c4110030e2edf06db87f5b6e4efc27300977683d53f040996d6dcc9d8f3f08b7",
	Properties: map[string]string{"hw_ephemeral_encryption": "true", "os_encrypt_key_id": "0b1e8a9a-6f0e-4d8c-9b0b-6e2c1f9f7a11"},
	Created:    time.Date(2026, 11, 26, 11, 0, 0, 0, time.UTC),
}

var sidecarFormat = testenv.Stored[Image]{Golden: filepath.Join("testdata", "sidecar.v1.json"), Encode: encodeSidecar, Decode: decodeSidecar}

func TestStoredSidecarGolden(t *testing.T) {
	sidecarFormat.CheckGolden(t, goldenImage, *update)
}

// TestStoredSidecarReads: a sidecar as the code before the stored format
// had its own struct wrote it (testdata/sidecar.v1.json, written then)
// still reads, whole, through Get and Lookup.
func TestStoredSidecarReads(t *testing.T) {
	b := sidecarFormat.CheckReads(t, goldenImage)
	d := &Dir{path: t.TempDir()}
	if err := os.WriteFile(d.sidecar(goldenImage.Name), b, 0o640); err != nil {
		t.Fatal(err)
	}
	img, err := d.Get(t.Context(), goldenImage.Name)
	if err != nil || !reflect.DeepEqual(img, goldenImage) {
		t.Errorf("Get = %+v, %v; want %+v", img, err, goldenImage)
	}
	base, err := d.Lookup(t.Context(), goldenImage.Name)
	if err != nil || base.Path != filepath.Join(d.path, goldenImage.File) || base.Format != goldenImage.Format {
		t.Errorf("Lookup = %+v, %v", base, err)
	}
	if _, err := decodeSidecar([]byte(`{"size": "big"}`)); err == nil {
		t.Error("a sidecar with a string for a size decoded")
	}
}

// TestStoredSidecarKeepsEveryField: every field of an imported image
// survives its sidecar (Legacy is for images without one); a field added
// to Image and not to sidecarV1 fails here.
func TestStoredSidecarKeepsEveryField(t *testing.T) {
	img := testenv.Filled[Image](t)
	img.Legacy = false
	sidecarFormat.CheckRoundTrip(t, img)
}
