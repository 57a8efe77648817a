package devices

import (
	"flag"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden stored formats in testdata")

func goldenTime(min int) *time.Time {
	t := time.Date(2026, 11, 26, 11, min, 0, 0, time.UTC)
	return &t
}

var goldenDevice = Device{
	Address: "0000:3b:00.0", Host: "h1", VendorID: "10de", ProductID: "1eb8", Class: "0x030200", Alias: "gpu",
	Total: 1, Reserved: 1, Used: 0, Traits: []string{TraitOneTimeUse},
	OneTimeUse: true, LiveMigratable: false, Present: true,
	Consumer: "", ConsumerName: "web-1",
	BurnedAt: goldenTime(1), ReleasedAt: goldenTime(2), CleanedAt: nil,
	LastCleanupHook: &HookResult{Outcome: "failed", Message: "exit status 3", At: *goldenTime(3)},
}

var deviceFormat = testenv.Stored[Device]{Golden: filepath.Join("testdata", "device.v1.json"), Encode: encodeDevice, Decode: decodeDevice}

func TestStoredDeviceGolden(t *testing.T) {
	d := goldenDevice
	d.Generation = 9 // the record's version: stored as 0
	got := putOp(d, 0).Value
	testenv.Golden(t, deviceFormat.Golden, got, *update)
}

// TestStoredDeviceReads: a record as the code before the stored format
// had its own struct wrote it (testdata/device.v1.json, written then)
// still reads, whole, through the inventory.
func TestStoredDeviceReads(t *testing.T) {
	want := goldenDevice
	want.NeedsCleaning = true
	b := deviceFormat.CheckReads(t, want)
	st := openBolt(t, t.TempDir()).st
	inv, err := New(st, Options{Host: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CommitGroup(t.Context(), inv.group, []store.GroupOp{{Key: keyPrefix + want.Address, Value: b}}); err != nil {
		t.Fatal(err)
	}
	dev, err := inv.Show(t.Context(), want.Address)
	want.Generation = 1
	if err != nil || !reflect.DeepEqual(dev, want) {
		t.Errorf("Show = %+v, %v; want %+v", dev, err, want)
	}
	if _, err := decodeDevice([]byte(`{"total": "one"}`)); err == nil {
		t.Error("a record with a string for total decoded")
	}
}

// TestStoredDeviceKeepsEveryField: every field of a device survives its
// stored format (events and the cleanup hook's input carry it whole); a
// field added to Device and not to deviceV1 fails here.
func TestStoredDeviceKeepsEveryField(t *testing.T) {
	deviceFormat.CheckRoundTrip(t, testenv.Filled[Device](t))
}
