package devices

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

var update = flag.Bool("update", false, "rewrite the golden stored formats in testdata")

func goldenTime(min int) *time.Time {
	t := time.Date(2026, 11, 26, 11, min, 0, 0, time.UTC)
	return &t
}

var goldenDevice = types.Device{
	Address: "0000:3b:00.0", Host: "h1", VendorID: "10de", ProductID: "1eb8", Class: "0x030200", Alias: "gpu",
	Total: 1, Reserved: 1, Used: 0, Traits: []string{types.TraitOneTimeUse},
	OneTimeUse: true, LiveMigratable: false, Present: true,
	Consumer: "", ConsumerName: "web-1",
	BurnedAt: goldenTime(1), ReleasedAt: goldenTime(2), CleanedAt: nil,
	LastCleanupHook: &types.HookResult{Outcome: "failed", Message: "exit status 3", At: *goldenTime(3)},
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

func TestStoredDeviceGolden(t *testing.T) {
	got := putOp(goldenDevice, 0).Value
	if want := golden(t, "device.v1.json", got); string(got) != string(want) {
		t.Errorf("stored device format changed:\n got %s\nwant %s", got, want)
	}
}
