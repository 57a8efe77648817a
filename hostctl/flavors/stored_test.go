package flavors

import (
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden stored formats in testdata")

var goldenFlavor = Flavor{
	Name: "m1.enc", VCPUs: 2, RAM: 2048, Disk: 20, Ephemeral: 5, Swap: 512,
	Description: "an encrypted flavor",
	ExtraSpecs:  map[string]string{"hw:ephemeral_encryption": "true", "hw:ephemeral_encryption_format": "luks"},
	Created:     time.Date(2026, 11, 26, 11, 0, 0, 0, time.UTC),
}

// flavorFormat is the stored format of flavors, read as the record of
// the given version.
func flavorFormat(version int64) testenv.Stored[Flavor] {
	return testenv.Stored[Flavor]{
		Golden: filepath.Join("testdata", "flavor.v1.json"),
		Encode: encodeFlavor,
		Decode: func(b []byte) (Flavor, error) { return decodeFlavor(b, version) },
	}
}

func TestStoredFlavorGolden(t *testing.T) {
	f := goldenFlavor
	f.Version = 7 // the record's, never stored
	flavorFormat(0).CheckGolden(t, f, *update)
}

// TestStoredFlavorReads: a record as the code before the stored format
// had its own struct wrote it (testdata/flavor.v1.json, written then)
// still reads, whole.
func TestStoredFlavorReads(t *testing.T) {
	want := goldenFlavor
	want.Version = 3
	flavorFormat(3).CheckReads(t, want)
	if _, err := decodeFlavor([]byte(`{"name": 1}`), 1); err == nil {
		t.Error("a record with a number for a name decoded")
	}
}

// TestStoredFlavorKeepsEveryField: every field of a flavor but its
// version (the record's) survives the stored format; a field added to
// Flavor and not to flavorV1 fails here.
func TestStoredFlavorKeepsEveryField(t *testing.T) {
	f := testenv.Filled[Flavor](t)
	flavorFormat(f.Version).CheckRoundTrip(t, f)
}
