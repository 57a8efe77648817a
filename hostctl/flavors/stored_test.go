package flavors

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

var goldenFlavor = types.Flavor{
	Name: "m1.enc", VCPUs: 2, RAM: 2048, Disk: 20, Ephemeral: 5, Swap: 512,
	Description: "an encrypted flavor",
	ExtraSpecs:  map[string]string{"hw:ephemeral_encryption": "true", "hw:ephemeral_encryption_format": "luks"},
	Created:     time.Date(2026, 11, 26, 11, 0, 0, 0, time.UTC),
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

func TestStoredFlavorGolden(t *testing.T) {
	got, err := json.Marshal(goldenFlavor)
	if err != nil {
		t.Fatal(err)
	}
	if want := golden(t, "flavor.v1.json", got); string(got) != string(want) {
		t.Errorf("stored flavor format changed:\n got %s\nwant %s", got, want)
	}
}
