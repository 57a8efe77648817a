package schema_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/schema"
)

func TestInstanceSpecValid(t *testing.T) {
	full, err := os.ReadFile(filepath.Join("testdata", "instance-full.json"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("full", func(t *testing.T) {
		if err := schema.ValidateJSON(schema.InstanceSpec, full); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("full round trip through model.Instance", func(t *testing.T) {
		// The spec uses every field and decodes into the Go types without
		// unknown fields; re-encoded, it is still valid.
		dec := json.NewDecoder(bytes.NewReader(full))
		dec.DisallowUnknownFields()
		var in model.Instance
		if err := dec.Decode(&in); err != nil {
			t.Fatal(err)
		}
		if err := everyFieldSet(reflect.ValueOf(in), "instance"); err != "" {
			t.Errorf("testdata/instance-full.json does not use every field: %s", err)
		}
		again, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if err := schema.ValidateJSON(schema.InstanceSpec, again); err != nil {
			t.Fatal(err)
		}
	})
	for name, doc := range map[string]string{
		"minimal":             `{"name":"a"}`,
		"name 63 chars":       `{"name":"` + strings.Repeat("a", 63) + `"}`,
		"hostname 253 chars":  `{"name":"a","hostname":"` + strings.Repeat(strings.Repeat("a", 63)+".", 3) + strings.Repeat("b", 61) + `"}`,
		"tag 60 chars":        `{"name":"a","disks":[{"name":"vda","tag":"` + strings.Repeat("é", 60) + `"}]}`,
		"share tag 36 chars":  `{"name":"a","shares":[{"share_id":"1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e","tag":"` + strings.Repeat("a", 36) + `"}]}`,
		"empty collections":   `{"name":"a","addresses":[],"meta":{},"disks":[],"nics":[],"shares":[],"pci_devices":[],"vendor_data":{}}`,
		"vlan as 100.0":       `{"name":"a","nics":[{"mac":"fa:16:3e:00:00:01","vlan":100.0}]}`,
		"user data 65535":     `{"name":"a","user_data":"` + strings.Repeat("x", 65535) + `"}`,
		"meta key 255 chars":  `{"name":"a","meta":{"` + strings.Repeat("k", 255) + `":"v"}}`,
		"cidr ipv6":           `{"name":"a","nics":[{"mac":"fa:16:3e:00:00:01","ips":[{"address":"2001:db8::5/128"}]}]}`,
		"serial 36 chars":     `{"name":"a","disks":[{"name":"vda","serial":"` + strings.Repeat("s", 36) + `"}]}`,
		"two-letter disk":     `{"name":"a","disks":[{"name":"xvdzz"}]}`,
		"public key x509":     `{"name":"a","public_keys":[{"name":"k","type":"x509","data":"d"}]}`,
		"file without body":   `{"name":"a","files":[{"path":"/x"}]}`,
		"dedicated cpu 0":     `{"name":"a","dedicated_cpus":[0]}`,
		"launch index 3":      `{"name":"a","launch_index":3}`,
		"no config drive":     `{"name":"a","config_drive":false}`,
		"pci function 7":      `{"name":"a","pci_devices":[{"address":"ffff:ff:1f.7"}]}`,
		"nested vendor data":  `{"name":"a","vendor_data":{"x":[{"y":null}]}}`,
		"mac upper case":      `{"name":"a","nics":[{"mac":"FA:16:3E:AB:CD:EF"}]}`,
		"ipv4-mapped address": `{"name":"a","addresses":["::ffff:10.0.0.1"]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := schema.ValidateJSON(schema.InstanceSpec, []byte(doc)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// everyFieldSet reports the first field of v (recursively, through the
// first element of slices) left at its zero value, or "".
func everyFieldSet(v reflect.Value, path string) string {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if msg := everyFieldSet(v.Field(i), path+"."+f.Name); msg != "" {
				return msg
			}
		}
	case reflect.Slice:
		if v.Len() == 0 {
			return path
		}
		return everyFieldSet(v.Index(0), path+"[0]")
	case reflect.Pointer:
		if v.IsNil() {
			return path
		}
		return everyFieldSet(v.Elem(), path)
	case reflect.Bool, reflect.Int:
		// false and 0 are legitimate values.
	default:
		if v.IsZero() {
			return path
		}
	}
	return ""
}

func TestInstanceSpecInvalid(t *testing.T) {
	const mac = `"mac":"fa:16:3e:00:00:01"`
	tests := []struct {
		name string
		doc  string
		ptr  string
	}{
		{"name missing", `{"uuid":"8c2e4b1a-3d5f-4a6b-9c7d-0e1f2a3b4c5d"}`, ""},
		{"not an object", `"web"`, ""},
		{"unknown top-level field", `{"name":"a","nmae":"b"}`, "/nmae"},
		{"unknown field in disks[0]", `{"name":"a","disks":[{"name":"vda","sizee":"1G"}]}`, "/disks/0/sizee"},
		{"unknown field in nics[0].ips[0]", `{"name":"a","nics":[{` + mac + `,"ips":[{"address":"10.0.0.1/24","dns4":[]}]}]}`, "/nics/0/ips/0/dns4"},
		{"name with space", `{"name":"web 01"}`, "/name"},
		{"name starting with dash", `{"name":"-web"}`, "/name"},
		{"name 64 chars", `{"name":"` + strings.Repeat("a", 64) + `"}`, "/name"},
		{"name not a string", `{"name":1}`, "/name"},
		{"bad uuid", `{"name":"a","uuid":"8c2e4b1a3d5f4a6b9c7d0e1f2a3b4c5d"}`, "/uuid"},
		{"hostname underscore", `{"name":"a","hostname":"web_01"}`, "/hostname"},
		{"hostname label 64", `{"name":"a","hostname":"` + strings.Repeat("a", 64) + `.example"}`, "/hostname"},
		{"hostname trailing dash", `{"name":"a","hostname":"web-.example"}`, "/hostname"},
		{"hostname 254 chars", `{"name":"a","hostname":"` + strings.Repeat(strings.Repeat("a", 63)+".", 3) + strings.Repeat("b", 62) + `"}`, "/hostname"},
		{"project_id 256", `{"name":"a","project_id":"` + strings.Repeat("p", 256) + `"}`, "/project_id"},
		{"launch_index negative", `{"name":"a","launch_index":-1}`, "/launch_index"},
		{"bad address format", `{"name":"a","addresses":["300.1.1.1"]}`, "/addresses/0"},
		{"address with prefix", `{"name":"a","addresses":["10.0.0.1/24"]}`, "/addresses/0"},
		{"duplicate address", `{"name":"a","addresses":["10.0.0.1","10.0.0.1"]}`, "/addresses"},
		{"meta value number", `{"name":"a","meta":{"a/b":1}}`, "/meta/a~1b"},
		{"meta value under an odd key", `{"name":"a","meta":{"a b%~":1}}`, "/meta/a b%~0"},
		{"meta value 256", `{"name":"a","meta":{"k":"` + strings.Repeat("v", 256) + `"}}`, "/meta/k"},
		{"meta key 256", `{"name":"a","meta":{"` + strings.Repeat("k", 256) + `":"v"}}`, "/meta/" + strings.Repeat("k", 256)},
		{"public key without data", `{"name":"a","public_keys":[{"name":"k"}]}`, "/public_keys/0"},
		{"public key type rsa", `{"name":"a","public_keys":[{"name":"k","type":"rsa","data":"d"}]}`, "/public_keys/0/type"},
		{"public key empty name", `{"name":"a","public_keys":[{"name":"","data":"d"}]}`, "/public_keys/0/name"},
		{"user data too long", `{"name":"a","user_data":"` + strings.Repeat("x", 65536) + `"}`, "/user_data"},
		{"vendor data a string", `{"name":"a","vendor_data":"x"}`, "/vendor_data"},
		{"relative file path", `{"name":"a","files":[{"path":"etc/motd","content":""}]}`, "/files/0/path"},
		{"file without path", `{"name":"a","files":[{"content":"x"}]}`, "/files/0"},
		{"dedicated cpus repeated", `{"name":"a","dedicated_cpus":[1,1]}`, "/dedicated_cpus"},
		{"dedicated cpu negative", `{"name":"a","dedicated_cpus":[-1]}`, "/dedicated_cpus/0"},
		{"config drive a string", `{"name":"a","config_drive":"no"}`, "/config_drive"},
		{"disk without name", `{"name":"a","disks":[{"bus":"virtio"}]}`, "/disks/0"},
		{"disk name vd", `{"name":"a","disks":[{"name":"vd"}]}`, "/disks/0/name"},
		{"disk name nvme", `{"name":"a","disks":[{"name":"nvme0n1"}]}`, "/disks/0/name"},
		{"disk bus xen", `{"name":"a","disks":[{"name":"vda","bus":"xen"}]}`, "/disks/0/bus"},
		{"disk serial with space", `{"name":"a","disks":[{"name":"vda","serial":"a b"}]}`, "/disks/0/serial"},
		{"disk serial 37", `{"name":"a","disks":[{"name":"vda","serial":"` + strings.Repeat("s", 37) + `"}]}`, "/disks/0/serial"},
		{"tag with slash", `{"name":"a","disks":[{"name":"vda","tag":"db/data"}]}`, "/disks/0/tag"},
		{"tag with comma", `{"name":"a","disks":[{"name":"vda","tag":"db,data"}]}`, "/disks/0/tag"},
		{"tag with newline", `{"name":"a","disks":[{"name":"vda","tag":"db\ndata"}]}`, "/disks/0/tag"},
		{"tag with DEL", `{"name":"a","disks":[{"name":"vda","tag":"db\u007f"}]}`, "/disks/0/tag"},
		{"tag 61 chars", `{"name":"a","nics":[{` + mac + `,"tag":"` + strings.Repeat("t", 61) + `"}]}`, "/nics/0/tag"},
		{"empty tag", `{"name":"a","nics":[{` + mac + `,"tag":""}]}`, "/nics/0/tag"},
		{"disk size 10GB", `{"name":"a","disks":[{"name":"vda","size":"10GB"}]}`, "/disks/0/size"},
		{"encrypted string", `{"name":"a","disks":[{"name":"vda","encrypted":"True"}]}`, "/disks/0/encrypted"},
		{"nic without mac", `{"name":"a","nics":[{"tag":"x"}]}`, "/nics/0"},
		{"bad mac", `{"name":"a","nics":[{"mac":"fa:16:3e:00:00"}]}`, "/nics/0/mac"},
		{"nic bus usb", `{"name":"a","nics":[{` + mac + `,"bus":"usb"}]}`, "/nics/0/bus"},
		{"vlan a string", `{"name":"a","nics":[{` + mac + `,"vlan":"100"}]}`, "/nics/0/vlan"},
		{"vlan null", `{"name":"a","nics":[{` + mac + `,"vlan":null}]}`, "/nics/0/vlan"},
		{"vlan 4096", `{"name":"a","nics":[{` + mac + `,"vlan":4096}]}`, "/nics/0/vlan"},
		{"mtu 67", `{"name":"a","nics":[{` + mac + `,"mtu":67}]}`, "/nics/0/mtu"},
		{"vf_trusted string", `{"name":"a","nics":[{` + mac + `,"vf_trusted":"yes"}]}`, "/nics/0/vf_trusted"},
		{"ip without address", `{"name":"a","nics":[{` + mac + `,"ips":[{"gateway":"10.0.0.1"}]}]}`, "/nics/0/ips/0"},
		{"ip without prefix", `{"name":"a","nics":[{` + mac + `,"ips":[{"address":"10.0.0.5"}]}]}`, "/nics/0/ips/0/address"},
		{"bad gateway", `{"name":"a","nics":[{` + mac + `,"ips":[{"address":"10.0.0.5/24","gateway":"10.0.0"}]}]}`, "/nics/0/ips/0/gateway"},
		{"bad dns", `{"name":"a","nics":[{` + mac + `,"ips":[{"address":"10.0.0.5/24","dns":["10.0.0.1","dns.example"]}]}]}`, "/nics/0/ips/0/dns/1"},
		{"share without id", `{"name":"a","shares":[{"tag":"data"}]}`, "/shares/0"},
		{"share id not a uuid", `{"name":"a","shares":[{"share_id":"data"}]}`, "/shares/0/share_id"},
		{"share tag 37 chars", `{"name":"a","shares":[{"share_id":"1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e","tag":"` + strings.Repeat("a", 37) + `"}]}`, "/shares/0/tag"},
		{"share tag underscore", `{"name":"a","shares":[{"share_id":"1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e","tag":"a_b"}]}`, "/shares/0/tag"},
		{"pci device without address", `{"name":"a","pci_devices":[{"one_time_use":true}]}`, "/pci_devices/0"},
		{"pci function 8", `{"name":"a","pci_devices":[{"address":"0000:3b:00.8"}]}`, "/pci_devices/0/address"},
		{"pci short address", `{"name":"a","pci_devices":[{"address":"3b:00.1"}]}`, "/pci_devices/0/address"},
		{"one_time_use string", `{"name":"a","pci_devices":[{"address":"0000:3b:00.1","one_time_use":"yes"}]}`, "/pci_devices/0/one_time_use"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantViolation(t, schema.ValidateJSON(schema.InstanceSpec, []byte(tc.doc)), schema.InstanceSpec, tc.ptr)
		})
	}
}

// The schema describes model.Instance exactly: at every level the
// properties are the struct's JSON names, unknown ones are refused, and the
// required properties are the fields without omitempty.
func TestInstanceSpecMatchesModel(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(schema.Source(schema.InstanceSpec), &root); err != nil {
		t.Fatal(err)
	}
	// File.content has no omitempty, so it is always encoded, but a spec
	// may leave it out for an empty file.
	optional := map[string]bool{"files[].content": true}
	checkStruct(t, root, root, reflect.TypeFor[model.Instance](), "", optional)
}

func checkStruct(t *testing.T, root, obj map[string]any, typ reflect.Type, path string, optional map[string]bool) {
	t.Helper()
	obj = deref(t, root, obj)
	if obj["additionalProperties"] != false {
		t.Errorf("%s: additionalProperties is not false", orRoot(path))
	}
	props, _ := obj["properties"].(map[string]any)
	var required []string
	for _, r := range asSlice(obj["required"]) {
		required = append(required, r.(string))
	}
	var names, wantRequired []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		names = append(names, name)
		fpath := path + name
		if !strings.Contains(opts, "omitempty") && !optional[fpath] {
			wantRequired = append(wantRequired, name)
		}
		sub, ok := props[name].(map[string]any)
		if !ok {
			t.Errorf("%s: no property in the schema", fpath)
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			items, _ := deref(t, root, sub)["items"].(map[string]any)
			if items == nil {
				t.Errorf("%s: no items schema", fpath)
				continue
			}
			checkStruct(t, root, items, ft.Elem(), fpath+"[].", optional)
		}
	}
	for name := range props {
		if !slices.Contains(names, name) {
			t.Errorf("%s%s: in the schema, not in %s", path, name, typ)
		}
	}
	slices.Sort(required)
	slices.Sort(wantRequired)
	if !slices.Equal(required, wantRequired) {
		t.Errorf("%s: required = %v, want %v", orRoot(path), required, wantRequired)
	}
}

func deref(t *testing.T, root, obj map[string]any) map[string]any {
	t.Helper()
	ref, ok := obj["$ref"].(string)
	if !ok {
		return obj
	}
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok {
		t.Fatalf("unexpected $ref %q", ref)
	}
	def, ok := root["$defs"].(map[string]any)[name].(map[string]any)
	if !ok {
		t.Fatalf("$ref %q: no such definition", ref)
	}
	return def
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func orRoot(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}
