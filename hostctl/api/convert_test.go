package api

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	devinv "github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/encryption"
	hostreg "github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWireBodiesUnchanged: the wire types answer with the bodies the API
// answered with when they were the domain types themselves (the spec as
// model.Instance, the guest devices as metadata.Device, the key reports
// as keyrotation's): every field of the domain struct, filled, converts
// and marshals to the same JSON. A field added to a domain struct and
// not to its conversion fails here.
func TestWireBodiesUnchanged(t *testing.T) {
	spec := testenv.Filled[model.Instance](t)
	dev := testenv.Filled[metadata.Device](t)
	report := testenv.Filled[keyrotation.Report](t)
	rotation := testenv.Filled[keyrotation.Rotation](t)
	bd := testenv.Filled[encryption.BlockDevice](t)
	tests := []struct {
		name      string
		got, want any
	}{
		{"instance spec", wireSpec(&spec), &spec},
		{"guest device", wireGuestDevice(dev), dev},
		{"key report", wireKeyReport(report), report},
		{"key rotation", wireKeyRotation(rotation), rotation},
		{"key policy", wireKeyPolicy(report.Policy), report.Policy},
		{"key status", wireKeyStatus(report.Status), report.Status},
		// The block-device record as the API showed it was its stored
		// format.
		{"block device", wireBlockDevice(bd), storedDisk(t, bd)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := jsonOf(t, tt.got), jsonOf(t, tt.want); got != want {
				t.Errorf("wire body\n got %s\nwant %s", got, want)
			}
		})
	}
	if got := domainKeyPolicy(wireKeyPolicy(report.Policy)); !reflect.DeepEqual(got, report.Policy) {
		t.Errorf("key policy round trip: %+v, want %+v", got, report.Policy)
	}
}

func storedDisk(t *testing.T, bd encryption.BlockDevice) json.RawMessage {
	t.Helper()
	b, err := encryption.EncodeBlockDevices(encryption.BlockDevices{Instance: "i", Disks: map[string]encryption.BlockDevice{"d": bd}})
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Disks map[string]json.RawMessage `json:"disks"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Disks["d"]
}

// TestWireInstance: every field of the controller's instance reaches the
// wire instance.
func TestWireInstance(t *testing.T) {
	in := testenv.Filled[controller.Instance](t)
	got := wireInstance(&in)
	want := `{"spec":` + jsonOf(t, in.Spec) + `,"revision":7,"document_version":7,"config_drive":"s","host":"s","state":"s","fault":"s",` +
		`"devices":[` + jsonOf(t, in.Devices[0]) + `],"transports":[{"name":"s","revision":7,"next_boot":7,"note":"s"}],"warnings":["s"],` +
		`"block_devices":[` + jsonOf(t, wireBlockDevice(in.BlockDevices[0])) + `],"host_devices":[{"kind":"s","detail":"s"}]}`
	if g := jsonOf(t, got); g != want {
		t.Errorf("wire instance\n got %s\nwant %s", g, want)
	}
	if wireInstance(nil) != nil {
		t.Error("a nil instance converted to a non-nil one")
	}
}

// TestWireDevice: every field of an inventory record reaches the wire
// device, under the names the API used.
func TestWireDevice(t *testing.T) {
	d := testenv.Filled[devinv.Device](t)
	got := jsonOf(t, wireDevice(d))
	want := `{"address":"s","host":"s","vendor_id":"s","product_id":"s","class":"s","alias":"s","total":7,"reserved":7,"used":7,"traits":["s"],` +
		`"one_time_use":true,"live_migratable":true,"present":true,"consumer":"s","consumer_name":"s","needs_cleaning":true,` +
		`"burned_at":"2026-11-26T12:00:00Z","released_at":"2026-11-26T12:00:00Z","cleaned_at":"2026-11-26T12:00:00Z",` +
		`"last_cleanup_hook":{"outcome":"s","message":"s","at":"2026-11-26T12:00:00Z"},"generation":7}`
	if got != want {
		t.Errorf("wire device\n got %s\nwant %s", got, want)
	}
}

// TestKeyPolicyNames: the wire's policy names are keyrotation's.
func TestKeyPolicyNames(t *testing.T) {
	for wire, domain := range map[string]keyrotation.PolicyName{
		types.KeyPolicyDisabled:           keyrotation.Disabled,
		types.KeyPolicyWithVersionUpgrade: keyrotation.WithVersionUpgrade,
		types.KeyPolicyKeyGeneration:      keyrotation.KeyGeneration,
	} {
		if wire != string(domain) {
			t.Errorf("wire policy %q is keyrotation's %q", wire, domain)
		}
	}
}

// TestWireHostStatus: every field of a host's status that the API showed
// when the host registry answered with the wire type reaches it, under
// the same names (the age in seconds); the lease holder stays out.
func TestWireHostStatus(t *testing.T) {
	s := testenv.Filled[hostreg.Status](t)
	got := jsonOf(t, wireHostStatus(s))
	want := `{"host":"s","version":"s","started":"2026-11-26T12:00:00Z","last_seen":"2026-11-26T12:00:00Z","instances":7,` +
		`"age_seconds":7e-9,"down":true,"stopped":true,"traits":["s"]}`
	if got != want {
		t.Errorf("wire host status\n got %s\nwant %s", got, want)
	}
}
