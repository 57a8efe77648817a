package schema_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/schema"
)

// devicesDoc returns a valid 1.1 devices document of n devices: NICs, disks
// and shares in turn.
func devicesDoc(n int) string {
	devs := make([]string, n)
	for i := range devs {
		switch i % 4 {
		case 0:
			devs[i] = fmt.Sprintf(`{"type":"nic","bus":"pci","address":"0000:00:%02x.0","mac":"fa:16:3e:00:00:%02x","tags":["net%d"],"vlan":%d,"vf_trusted":false}`, i, i, i, 100+i)
		case 1:
			devs[i] = fmt.Sprintf(`{"type":"disk","bus":"pci","address":"0000:01:%02x.0","serial":"vol-%d","tags":["disk%d"],"encrypted":true}`, i, i, i)
		case 2:
			devs[i] = fmt.Sprintf(`{"type":"disk","bus":"scsi","address":"none","serial":"vol-%d","tags":["disk%d"],"encrypted":false}`, i, i)
		default:
			devs[i] = fmt.Sprintf(`{"type":"share","bus":"none","address":"none","share_id":"1f5a1f4e-7a4b-4c1e-9b0e-%012x","tag":"share-%d"}`, i, i)
		}
	}
	return `{"devices":[` + strings.Join(devs, ",") + `]}`
}

func BenchmarkValidateDevices(b *testing.B) {
	doc := decode(b, devicesDoc(32))
	if err := schema.Validate(schema.DevicesV11, doc); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := schema.Validate(schema.DevicesV11, doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateDevicesJSON(b *testing.B) {
	data := []byte(devicesDoc(32))
	if err := schema.ValidateJSON(schema.DevicesV11, data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := schema.ValidateJSON(schema.DevicesV11, data); err != nil {
			b.Fatal(err)
		}
	}
}
