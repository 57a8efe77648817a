package flavors

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

var goldenFlavor = Flavor{
	Name: "m1.enc", VCPUs: 2, RAM: 2048, Disk: 20, Ephemeral: 5, Swap: 512,
	Description: "an encrypted flavor",
	ExtraSpecs:  map[string]string{"hw:ephemeral_encryption": "true", "hw:ephemeral_encryption_format": "luks"},
	Created:     time.Date(2026, 11, 26, 11, 0, 0, 0, time.UTC),
}

func TestStoredFlavorGolden(t *testing.T) {
	f := goldenFlavor
	f.Version = 7 // the record's, never stored
	got, err := encodeFlavor(f)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, filepath.Join("testdata", "flavor.v1.json"), got, *update)
}

// TestStoredFlavorReads: a record as the code before the stored format
// had its own struct wrote it (testdata/flavor.v1.json, written then)
// still reads, whole.
func TestStoredFlavorReads(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "flavor.v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeFlavor(b, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := goldenFlavor
	want.Version = 3
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	if _, err := decodeFlavor([]byte(`{"name": 1}`), 1); err == nil {
		t.Error("a record with a number for a name decoded")
	}
}

// TestStoredFlavorKeepsEveryField: every field of a flavor but its
// version (the record's) survives the stored format; a field added to
// Flavor and not to flavorV1 fails here.
func TestStoredFlavorKeepsEveryField(t *testing.T) {
	f := testenv.Filled[Flavor](t)
	b, err := encodeFlavor(f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeFlavor(b, f.Version)
	if err != nil || !reflect.DeepEqual(got, f) {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, f)
	}
}
