package schema_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/schema"
)

var deviceKinds = []schema.Kind{schema.DevicesV1, schema.DevicesV11, schema.DevicesV12}

// decode decodes s as ValidateJSON does.
func decode(t testing.TB, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("test document is not JSON: %v\n%s", err, s)
	}
	return v
}

// wantViolation asserts that err is a *schema.Error for kind with a
// violation at ptr, and that Error() names that pointer.
func wantViolation(t *testing.T, err error, kind schema.Kind, ptr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want a violation at %q", ptr)
	}
	var se *schema.Error
	if !errors.As(err, &se) {
		t.Fatalf("error is %T (%v), want *schema.Error", err, err)
	}
	if se.Kind != kind {
		t.Errorf("Kind = %q, want %q", se.Kind, kind)
	}
	shown := ptr
	if ptr == "" {
		shown = "(root)"
	}
	if !strings.Contains(se.Error(), shown+": ") {
		t.Errorf("Error() does not name %q: %s", shown, se)
	}
	for _, v := range se.Violations {
		if v.Pointer == ptr {
			return
		}
	}
	t.Errorf("no violation at %q: %#v", ptr, se.Violations)
}

// The specification's three examples (main, Xen HVM, LXC), with the missing
// comma of the Xen example fixed.
func TestSpecificationExamples(t *testing.T) {
	for _, name := range []string{"main", "xen", "lxc"} {
		data, err := os.ReadFile(filepath.Join("testdata", "spec-example-"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range deviceKinds {
			t.Run(name+"/"+string(kind), func(t *testing.T) {
				if err := schema.ValidateJSON(kind, data); err != nil {
					t.Fatal(err)
				}
				if err := schema.Validate(kind, decode(t, string(data))); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func TestValidDevices(t *testing.T) {
	tests := []struct {
		name  string
		kinds []schema.Kind
		doc   string
	}{
		{"no devices", deviceKinds, `{"devices":[]}`},
		{"upper-case mac", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","mac":"AA:BB:cc:dd:EE:0f"}]}`},
		{"nic with vlan and vf_trusted", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","address":"0000:00:03.0","mac":"fa:16:3e:00:00:01","vlan":4095,"vf_trusted":false,"tags":["a","b"]}]}`},
		{"vlan 0", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","vlan":0}]}`},
		{"address none on scsi", deviceKinds, `{"devices":[{"type":"disk","bus":"scsi","address":"none","serial":"vol-1","tags":["db"]}]}`},
		{"address none on pci", deviceKinds, `{"devices":[{"type":"disk","bus":"pci","address":"none"}]}`},
		{"address none on ide usb xen", deviceKinds, `{"devices":[{"type":"disk","bus":"ide","address":"none"},{"type":"disk","bus":"usb","address":"none"},{"type":"disk","bus":"xen","address":"none"}]}`},
		{"bus none with address none", deviceKinds, `{"devices":[{"type":"nic","bus":"none","address":"none","mac":"fa:16:3e:00:00:01","devname":"eth0"}]}`},
		{"no address", deviceKinds, `{"devices":[{"type":"disk","bus":"scsi"}]}`},
		{"usb address", deviceKinds, `{"devices":[{"type":"disk","bus":"usb","address":"1:a"}]}`},
		{"scsi hex address", deviceKinds, `{"devices":[{"type":"disk","bus":"scsi","address":"0:0:a:1f"}]}`},
		{"xen nova form", deviceKinds, `{"devices":[{"type":"disk","bus":"xen","address":"001200"},{"type":"disk","bus":"xen","address":"51712"}]}`},
		{"pci", []schema.Kind{schema.DevicesV12}, `{"devices":[{"type":"pci","bus":"pci","address":"0000:07:00.0","tags":["gpu","compute"]}]}`},
		{"pci address none", []schema.Kind{schema.DevicesV12}, `{"devices":[{"type":"pci","bus":"pci","address":"none","tags":["gpu"]}]}`},
		{"encrypted disk", []schema.Kind{schema.DevicesV11, schema.DevicesV12}, `{"devices":[{"type":"disk","bus":"pci","address":"0000:00:07.0","serial":"v","tags":["t"],"encrypted":true}]}`},
		{"share", []schema.Kind{schema.DevicesV11, schema.DevicesV12}, `{"devices":[{"type":"share","bus":"none","address":"none","share_id":"1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e","tag":"data-1"}]}`},
		{"share upper-case uuid", []schema.Kind{schema.DevicesV11, schema.DevicesV12}, `{"devices":[{"type":"share","bus":"none","address":"none","share_id":"1F5A1F4E-7A4B-4C1E-9B0E-2F3A4B5C6D7E","tag":"1F5A1F4E-7A4B-4C1E-9B0E-2F3A4B5C6D7E"}]}`},
	}
	for _, tc := range tests {
		for _, kind := range tc.kinds {
			t.Run(tc.name+"/"+string(kind), func(t *testing.T) {
				if err := schema.ValidateJSON(kind, []byte(tc.doc)); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func TestInvalidDevices(t *testing.T) {
	const uuid = "1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e"
	v1, v11 := []schema.Kind{schema.DevicesV1}, []schema.Kind{schema.DevicesV11, schema.DevicesV12}
	v12 := []schema.Kind{schema.DevicesV12}
	const pciDev = `"type":"pci","bus":"pci"`
	tests := []struct {
		name  string
		kinds []schema.Kind
		doc   string
		ptr   string
	}{
		{"devices missing", deviceKinds, `{}`, ""},
		{"not an object", deviceKinds, `[]`, ""},
		{"top-level extra key", deviceKinds, `{"devices":[],"version":1}`, "/version"},
		{"devices not an array", deviceKinds, `{"devices":{}}`, "/devices"},
		{"device not an object", deviceKinds, `{"devices":["nic"]}`, "/devices/0"},
		{"type missing", deviceKinds, `{"devices":[{"bus":"pci","mac":"fa:16:3e:00:00:01"}]}`, "/devices/0"},
		{"type unknown", deviceKinds, `{"devices":[{"type":"gpu","bus":"pci"}]}`, "/devices/0/type"},
		{"bus missing", deviceKinds, `{"devices":[{"type":"disk"}]}`, "/devices/0"},
		{"bus unknown", deviceKinds, `{"devices":[{"type":"disk","bus":"virtio"}]}`, "/devices/0/bus"},
		{"bus unanchored", deviceKinds, `{"devices":[{"type":"disk","bus":"xpcix"}]}`, "/devices/0/bus"},
		{"nic without mac", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","tags":["a"]}]}`, "/devices/0"},
		{"second nic without mac", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01"},{"type":"nic","bus":"pci"}]}`, "/devices/1"},
		{"mac five octets", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","mac":"01:22:22:42:22"}]}`, "/devices/0/mac"},
		{"mac dashes", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","mac":"01-22-22-42-22-21"}]}`, "/devices/0/mac"},
		{"mac not a string", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","mac":12}]}`, "/devices/0/mac"},
		{"tags a string", deviceKinds, `{"devices":[{"type":"disk","bus":"pci","tags":"db"}]}`, "/devices/0/tags"},
		{"tags holding a number", deviceKinds, `{"devices":[{"type":"disk","bus":"pci","tags":["db",1]}]}`, "/devices/0/tags/1"},
		{"empty tag", deviceKinds, `{"devices":[{"type":"disk","bus":"pci","tags":[""]}]}`, "/devices/0/tags/0"},
		{"pci address short", deviceKinds, `{"devices":[{"type":"disk","bus":"pci","address":"0000:00:02"}]}`, "/devices/0/address"},
		{"pci address unanchored", deviceKinds, `{"devices":[{"type":"disk","bus":"pci","address":"xx0000:00:02.0yy"}]}`, "/devices/0/address"},
		{"pci address trailing newline", deviceKinds, `{"devices":[{"type":"disk","bus":"pci","address":"0000:00:02.0\n"}]}`, "/devices/0/address"},
		{"pci address dot wildcard", deviceKinds, `{"devices":[{"type":"disk","bus":"pci","address":"0000:00:02x0"}]}`, "/devices/0/address"},
		{"scsi address three parts", deviceKinds, `{"devices":[{"type":"disk","bus":"scsi","address":"1:0:2"}]}`, "/devices/0/address"},
		{"ide address 2:0", deviceKinds, `{"devices":[{"type":"disk","bus":"ide","address":"2:0"}]}`, "/devices/0/address"},
		{"usb address upper case", deviceKinds, `{"devices":[{"type":"disk","bus":"usb","address":"1:A"}]}`, "/devices/0/address"},
		{"xen address name", deviceKinds, `{"devices":[{"type":"disk","bus":"xen","address":"xvda"}]}`, "/devices/0/address"},
		{"bus none with address", deviceKinds, `{"devices":[{"type":"nic","bus":"none","address":"0000:00:02.0","mac":"fa:16:3e:00:00:01"}]}`, "/devices/0/address"},
		{"address not a string", deviceKinds, `{"devices":[{"type":"disk","bus":"xen","address":0}]}`, "/devices/0/address"},
		{"vlan too large", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","vlan":4096}]}`, "/devices/0/vlan"},
		{"vlan fractional", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","vlan":1.5}]}`, "/devices/0/vlan"},
		{"vf_trusted string", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","vf_trusted":"true"}]}`, "/devices/0/vf_trusted"},
		{"serial on nic", deviceKinds, `{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","serial":"x"}]}`, "/devices/0/serial"},
		{"unknown property on disk", deviceKinds, `{"devices":[{"type":"disk","bus":"pci","size":"10G"}]}`, "/devices/0/size"},
		{"mac on disk", deviceKinds, `{"devices":[{"type":"disk","bus":"pci","mac":"fa:16:3e:00:00:01"}]}`, "/devices/0/mac"},
		{"relative disk path", deviceKinds, `{"devices":[{"type":"disk","bus":"none","path":"dev/sda"}]}`, "/devices/0/path"},
		{"encrypted in 1.0", v1, `{"devices":[{"type":"disk","bus":"pci","encrypted":true}]}`, "/devices/0/encrypted"},
		{"encrypted string True", v11, `{"devices":[{"type":"disk","bus":"pci","encrypted":"True"}]}`, "/devices/0/encrypted"},
		{"share in 1.0", v1, `{"devices":[{"type":"share","bus":"none","address":"none","share_id":"` + uuid + `","tag":"t"}]}`, "/devices/0/type"},
		{"share without tag", v11, `{"devices":[{"type":"share","bus":"none","address":"none","share_id":"` + uuid + `"}]}`, "/devices/0"},
		{"share without address", v11, `{"devices":[{"type":"share","bus":"none","share_id":"` + uuid + `","tag":"t"}]}`, "/devices/0"},
		{"share on pci", v11, `{"devices":[{"type":"share","bus":"pci","address":"none","share_id":"` + uuid + `","tag":"t"}]}`, "/devices/0/bus"},
		{"share with pci address", v11, `{"devices":[{"type":"share","bus":"none","address":"0000:00:02.0","share_id":"` + uuid + `","tag":"t"}]}`, "/devices/0/address"},
		{"share_id not a uuid", v11, `{"devices":[{"type":"share","bus":"none","address":"none","share_id":"share-1","tag":"t"}]}`, "/devices/0/share_id"},
		{"share tag with underscore", v11, `{"devices":[{"type":"share","bus":"none","address":"none","share_id":"` + uuid + `","tag":"a_b"}]}`, "/devices/0/tag"},
		{"share tag 256 chars", v11, `{"devices":[{"type":"share","bus":"none","address":"none","share_id":"` + uuid + `","tag":"` + strings.Repeat("a", 256) + `"}]}`, "/devices/0/tag"},
		{"share with tags", v11, `{"devices":[{"type":"share","bus":"none","address":"none","share_id":"` + uuid + `","tag":"t","tags":["t"]}]}`, "/devices/0/tags"},
		{"pci in 1.0", v1, `{"devices":[{` + pciDev + `,"address":"0000:07:00.0","tags":["gpu"]}]}`, "/devices/0/type"},
		{"pci in 1.1", []schema.Kind{schema.DevicesV11}, `{"devices":[{` + pciDev + `,"address":"0000:07:00.0","tags":["gpu"]}]}`, "/devices/0/type"},
		{"pci untagged", v12, `{"devices":[{` + pciDev + `,"address":"0000:07:00.0"}]}`, "/devices/0"},
		{"pci empty tags", v12, `{"devices":[{` + pciDev + `,"address":"0000:07:00.0","tags":[]}]}`, "/devices/0/tags"},
		{"pci without address", v12, `{"devices":[{` + pciDev + `,"tags":["gpu"]}]}`, "/devices/0"},
		{"pci on scsi", v12, `{"devices":[{"type":"pci","bus":"scsi","address":"0:0:0:0","tags":["gpu"]}]}`, "/devices/0/bus"},
		{"pci bad address", v12, `{"devices":[{` + pciDev + `,"address":"07:00.0","tags":["gpu"]}]}`, "/devices/0/address"},
		{"pci host address", v12, `{"devices":[{` + pciDev + `,"address":"0000:07:00.0","tags":["gpu"],"host_address":"0000:3b:00.0"}]}`, "/devices/0/host_address"},
		{"pci one_time_use", v12, `{"devices":[{` + pciDev + `,"address":"0000:07:00.0","tags":["gpu"],"one_time_use":true}]}`, "/devices/0/one_time_use"},
	}
	for _, tc := range tests {
		for _, kind := range tc.kinds {
			t.Run(tc.name+"/"+string(kind), func(t *testing.T) {
				wantViolation(t, schema.ValidateJSON(kind, []byte(tc.doc)), kind, tc.ptr)
				wantViolation(t, schema.Validate(kind, decode(t, tc.doc)), kind, tc.ptr)
			})
		}
	}
}

func TestErrorMessages(t *testing.T) {
	doc := `{"devices":[
		{"type":"nic","bus":"pci","address":"0000:00:02","mac":"fa:16:3e:00:00:01"},
		{"type":"nic","bus":"pci","tags":["a"]},
		{"type":"disk","bus":"pci","x~y/z":1}]}`
	err := schema.ValidateJSON(schema.DevicesV1, []byte(doc))
	var se *schema.Error
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want *schema.Error", err)
	}
	want := []schema.Violation{
		{Pointer: "/devices/0/address", Message: `"0000:00:02" does not match pattern ^(?:none|[a-f0-9]{4}:[a-f0-9]{2}:[a-f0-9]{2}\.[a-f0-9])$`, Value: "0000:00:02"},
		{Pointer: "/devices/1", Message: `missing property "mac"`}, // an object: no value
		{Pointer: "/devices/2/x~0y~1z", Message: "property not allowed", Value: json.Number("1")},
	}
	if len(se.Violations) != len(want) {
		t.Fatalf("violations = %#v, want %#v", se.Violations, want)
	}
	for i := range want {
		if se.Violations[i] != want[i] {
			t.Errorf("violation %d = %#v, want %#v", i, se.Violations[i], want[i])
		}
	}
	const prefix = `device-role-tagging/1.0: /devices/0/address: "0000:00:02" does not match pattern`
	if !strings.HasPrefix(se.Error(), prefix) {
		t.Errorf("Error() = %s\nwant prefix %s", se, prefix)
	}
	if !strings.Contains(se.Error(), `; /devices/1: missing property "mac"; `) {
		t.Errorf("Error() = %s", se)
	}

	// Several missing properties are reported one by one; violations are
	// ordered by array index numerically.
	many := `{"devices":[` + strings.Repeat(`{"type":"disk","bus":"pci"},`, 10) + `{}]}`
	err = schema.ValidateJSON(schema.DevicesV1, []byte(many))
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want *schema.Error", err)
	}
	want = []schema.Violation{
		{Pointer: "/devices/10", Message: `missing property "bus"`},
		{Pointer: "/devices/10", Message: `missing property "type"`},
	}
	if len(se.Violations) != 2 || se.Violations[0] != want[0] || se.Violations[1] != want[1] {
		t.Errorf("violations = %#v, want %#v", se.Violations, want)
	}
}

func TestAPIErrors(t *testing.T) {
	notSchemaError := func(t *testing.T, err error) {
		t.Helper()
		var se *schema.Error
		if err == nil || errors.As(err, &se) {
			t.Fatalf("got %v, want an ordinary error", err)
		}
	}
	t.Run("unknown kind", func(t *testing.T) {
		notSchemaError(t, schema.Validate("device-role-tagging/9", map[string]any{}))
		notSchemaError(t, schema.ValidateJSON("", []byte(`{}`)))
		if schema.Source("nope") != nil {
			t.Error("Source of an unknown kind is not nil")
		}
	})
	t.Run("trailing data", func(t *testing.T) {
		notSchemaError(t, schema.ValidateJSON(schema.DevicesV1, []byte(`{"devices":[]} {}`)))
		notSchemaError(t, schema.ValidateJSON(schema.DevicesV1, []byte(`{"devices":[]}]`)))
		notSchemaError(t, schema.ValidateJSON(schema.DevicesV1, []byte(`{"devices":[]}x`)))
		if err := schema.ValidateJSON(schema.DevicesV1, []byte(" {\"devices\":[]}\n\t ")); err != nil {
			t.Errorf("whitespace around the value: %v", err)
		}
	})
	t.Run("not JSON", func(t *testing.T) {
		notSchemaError(t, schema.ValidateJSON(schema.DevicesV1, []byte(`{"devices":[`)))
		notSchemaError(t, schema.ValidateJSON(schema.DevicesV1, nil))
	})
	t.Run("not a JSON value", func(t *testing.T) {
		notSchemaError(t, schema.Validate(schema.DevicesV1, map[string]any{"devices": []string{}}))
	})
	t.Run("big integers keep precision", func(t *testing.T) {
		// 2^53+1 would round to an integer in float64; as json.Number it
		// stays exact, and is still out of range.
		wantViolation(t, schema.ValidateJSON(schema.DevicesV1, []byte(`{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","vlan":9007199254740993}]}`)), schema.DevicesV1, "/devices/0/vlan")
	})
}

func TestSources(t *testing.T) {
	for _, kind := range []schema.Kind{schema.DevicesV1, schema.DevicesV11, schema.DevicesV12, schema.InstanceSpec} {
		t.Run(string(kind), func(t *testing.T) {
			src := schema.Source(kind)
			var doc map[string]any
			if err := json.Unmarshal(src, &doc); err != nil {
				t.Fatal(err)
			}
			if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
				t.Errorf("$schema = %v", doc["$schema"])
			}
			if id, _ := doc["$id"].(string); !strings.HasPrefix(id, "https://") {
				t.Errorf("$id = %v", doc["$id"])
			}
			// Every pattern is anchored at both ends, except the "starts
			// with /" rule for absolute paths.
			walk(doc, func(key string, v any) {
				p, ok := v.(string)
				if key != "pattern" || !ok || p == "^/" {
					return
				}
				if !strings.HasPrefix(p, "^") || !strings.HasSuffix(p, "$") {
					t.Errorf("pattern %q is not anchored", p)
				}
			})
			src[0] = 'X' // callers get a copy
			if !bytes.HasPrefix(schema.Source(kind), []byte("{")) {
				t.Error("Source returns shared memory")
			}
		})
	}
}

// walk calls fn for every key/value pair of every object in v.
func walk(v any, fn func(key string, v any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			fn(k, e)
			walk(e, fn)
		}
	case []any:
		for _, e := range v {
			walk(e, fn)
		}
	}
}

// Validate is called on every publish from many goroutines.
func TestConcurrentValidate(t *testing.T) {
	valid := decode(t, devicesDoc(8))
	invalid := decode(t, `{"devices":[{"type":"nic","bus":"pci"}]}`)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if err := schema.Validate(schema.DevicesV11, valid); err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				if err := schema.Validate(schema.DevicesV1, invalid); err == nil {
					t.Errorf("goroutine %d, round %d: invalid document accepted", g, i)
					return
				}
			}
		})
	}
	wg.Wait()
}
