package model_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vmeta/vmeta/internal/model"
)

const validSpec = `
name: db-1
uuid: 5A1B2C3D-0000-4000-8000-00000000ABCD
addresses: [10.0.0.5, "fd00::5"]
disks:
  - {name: vda, bus: virtio, address: "0000:00:04.0"}
  - {name: vdb, bus: virtio, tag: oracledb, serial: vol-1}
  - {name: sda, bus: scsi, address: "0:0:0:1", tag: squidcache}
nics:
  - {mac: "52:54:00:AA:BB:01", tag: oracledb}
shares:
  - {share_id: 7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99}
`

func TestParseSpecNormalizes(t *testing.T) {
	in, err := model.ParseSpec([]byte(validSpec))
	if err != nil {
		t.Fatal(err)
	}
	if in.UUID != "5a1b2c3d-0000-4000-8000-00000000abcd" {
		t.Errorf("uuid not lower-cased: %q", in.UUID)
	}
	if in.Hostname != "db-1" {
		t.Errorf("hostname default = %q, want the name", in.Hostname)
	}
	if in.NICs[0].MAC != "52:54:00:aa:bb:01" || in.NICs[0].Bus != "pci" {
		t.Errorf("nic not normalized: %+v", in.NICs[0])
	}
	if in.Shares[0].Tag != in.Shares[0].ShareID {
		t.Errorf("share tag should default to the share id, got %q", in.Shares[0].Tag)
	}
	// The same tag on a disk and a NIC is allowed by the specification.
	if in.Disks[1].Tag != in.NICs[0].Tag {
		t.Fatal("fixture should share a tag between a disk and a NIC")
	}
}

// config_drive defaults to true and survives the JSON round trip the
// store makes (false is not dropped as an empty value).
func TestParseSpecConfigDrive(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want bool
	}{
		{"name: a\n", true},
		{"name: a\nconfig_drive: true\n", true},
		{"name: a\nconfig_drive: false\n", false},
	} {
		in, err := model.ParseSpec([]byte(c.doc))
		if err != nil {
			t.Fatalf("%q: %v", c.doc, err)
		}
		if got := in.WantsConfigDrive(); got != c.want {
			t.Errorf("%q: WantsConfigDrive = %v, want %v", c.doc, got, c.want)
		}
		js, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		back, err := model.ParseSpec(js)
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		if got := back.WantsConfigDrive(); got != c.want {
			t.Errorf("%s: after a round trip WantsConfigDrive = %v, want %v", js, got, c.want)
		}
	}
}

func TestParseSpecExamples(t *testing.T) {
	entries, err := os.ReadDir("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		n++
		b, err := os.ReadFile("../../examples/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := model.ParseSpec(b); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
	}
	if n == 0 {
		t.Fatal("no example specs found")
	}
}

// replace swaps one line of validSpec, so each case differs from a valid
// spec in exactly one place.
func replace(old, new string) string {
	if !strings.Contains(validSpec, old) {
		panic("fixture does not contain " + old)
	}
	return strings.Replace(validSpec, old, new, 1)
}

// addNIC appends a second NIC to validSpec.
func addNIC(nic string) string {
	const first = "  - {mac: \"52:54:00:AA:BB:01\", tag: oracledb}\n"
	return replace(first, first+"  - "+nic+"\n")
}

func TestParseSpecRejects(t *testing.T) {
	long := strings.Repeat("x", 61)
	tests := []struct {
		name  string
		spec  string
		field string // the field the error must name
		value string // a fragment of the value it must quote ("" if none)
	}{
		{"not yaml", "name: [unclosed", "(document)", ""},
		{"not json", `{"name": "x"`, "(document)", ""},
		{"empty", "", "(document)", ""},
		{"duplicate key", "name: a\nname: b\n", "(document)", ""},
		{"unknown field", validSpec + "colour: blue\n", "colour", `"blue"`},
		{"unknown disk field", replace("{name: vda, bus: virtio,", "{name: vda, bus: virtio, colour: red,"), "disks[0].colour", "red"},
		{"missing name", strings.Replace(validSpec, "name: db-1\n", "", 1), "(document)", ""},
		{"bad name", replace("name: db-1", "name: db 1"), "name", `"db 1"`},
		{"bad uuid", replace("uuid: 5A1B2C3D-0000-4000-8000-00000000ABCD", "uuid: '1234'"), "uuid", `"1234"`},
		{"bad address", replace("10.0.0.5,", "300.1.1.1,"), "addresses[0]", "300.1.1.1"},
		{"duplicate address", replace(`"fd00::5"`, "10.0.0.5"), "addresses", ""},
		{"duplicate disk tag", replace("tag: squidcache", "tag: oracledb"), "disks[2].tag", `"oracledb"`},
		{"duplicate nic tag", addNIC("{mac: \"52:54:00:aa:bb:02\", tag: oracledb}"), "nics[1].tag", `"oracledb"`},
		{"tag with slash", replace("tag: squidcache", "tag: a/b"), "disks[2].tag", `"a/b"`},
		{"tag with comma", replace("tag: squidcache", "tag: 'a,b'"), "disks[2].tag", `"a,b"`},
		{"tag too long", replace("tag: squidcache", "tag: "+long), "disks[2].tag", long},
		{"tag with newline", replace("tag: squidcache", `tag: "a\nb"`), "disks[2].tag", ""},
		{"virtio with scsi address", replace(`address: "0000:00:04.0"`, `address: "0:0:0:1"`), "disks[0].address", `"0:0:0:1"`},
		{"scsi with pci address", replace(`address: "0:0:0:1"`, `address: "0000:00:05.0"`), "disks[2].address", `"0000:00:05.0"`},
		{"ide address out of range", replace("{name: sda, bus: scsi, address: \"0:0:0:1\"", "{name: hda, bus: ide, address: \"2:0\""), "disks[2].address", `"2:0"`},
		{"unknown bus", replace("{name: sda, bus: scsi,", "{name: sda, bus: floppy,"), "disks[2].bus", "floppy"},
		{"duplicate disk name", replace("{name: sda,", "{name: vda,"), "disks[2].name", `"vda"`},
		{"pci slot used twice", addNIC("{mac: \"52:54:00:aa:bb:02\", address: \"0000:00:04.0\"}"), "nics[1].address", "0000:00:04.0"},
		{"bad mac", replace(`"52:54:00:AA:BB:01"`, `"52:54:00:AA:BB"`), "nics[0].mac", "52:54:00:AA:BB"},
		{"duplicate mac", addNIC("{mac: \"52:54:00:aa:bb:01\"}"), "nics[1].mac", "52:54:00:aa:bb:01"},
		{"share tag too long", replace("{share_id: 7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99}", "{share_id: 7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99, tag: "+strings.Repeat("s", 37)+"}"), "shares[0].tag", ""},
		{"share tag charset", replace("{share_id: 7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99}", "{share_id: 7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99, tag: 'a b'}"), "shares[0].tag", `"a b"`},
		{"pci tag with slash", validSpec + "pci_devices: [{address: \"0000:3b:00.0\", tag: a/b}]\n", "pci_devices[0].tag", `"a/b"`},
		{"pci tag twice", validSpec + "pci_devices: [{address: \"0000:3b:00.0\", tag: gpu}]\npci_aliases: [{name: nic, tag: gpu}]\n", "pci_aliases[0].tag", `"gpu"`},
		{"pci alias tag with count 2", validSpec + "pci_aliases: [{name: gpu, count: 2, tag: gpu}]\n", "pci_aliases[0].count", "2"},
		{"pci guest address", validSpec + "pci_devices: [{address: \"0000:3b:00.0\", guest_address: \"00:07.0\"}]\n", "pci_devices[0].guest_address", `"00:07.0"`},
		{"pci guest address taken by a disk", validSpec + "pci_devices: [{address: \"0000:3b:00.0\", guest_address: \"0000:00:04.0\"}]\n", "pci_devices[0].guest_address", `"0000:00:04.0"`},
		{"wrong type", replace("{mac: \"52:54:00:AA:BB:01\", tag: oracledb}", "{mac: \"52:54:00:AA:BB:01\", vlan: high}"), "nics[0].vlan", "high"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := model.ParseSpec([]byte(tt.spec))
			if err == nil {
				t.Fatalf("accepted: %+v", in)
			}
			if !errors.Is(err, model.ErrInvalidSpec) {
				t.Fatalf("error is not a spec error: %v", err)
			}
			var se *model.SpecError
			if !errors.As(err, &se) {
				t.Fatalf("not a *SpecError: %T", err)
			}
			found := false
			for _, fe := range se.Errors {
				if strings.HasPrefix(fe.Field, tt.field) && fe.Rule != "" {
					found = true
				}
			}
			if !found {
				t.Errorf("no error names field %s: %v", tt.field, err)
			}
			if tt.value != "" && !strings.Contains(err.Error(), tt.value) {
				t.Errorf("error does not quote the value %q: %v", tt.value, err)
			}
		})
	}
}

func TestValidateTag(t *testing.T) {
	tests := []struct {
		tag string
		ok  bool
	}{
		{"oracledb", true},
		{"with space", true}, // legal in Nova; the guest agent escapes it
		{"ünïcode-tag", true},
		{strings.Repeat("é", 60), true}, // 60 characters, 120 bytes
		{strings.Repeat("x", 61), false},
		{"", false},
		{"a,b", false},
		{"a/b", false},
		{"a\nb", false},
		{"a\x00b", false},
		{"a\x7fb", false},
		{string([]byte{0xff, 0xfe}), false},
	}
	for _, tt := range tests {
		err := model.ValidateTag(tt.tag)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateTag(%q) = %v, want ok=%v", tt.tag, err, tt.ok)
		}
	}
}

func TestValidateShareTag(t *testing.T) {
	for tag, ok := range map[string]bool{
		"webdata": true, "7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99": true,
		"": false, "a_b": false, "a b": false, strings.Repeat("a", 37): false,
	} {
		if err := model.ValidateShareTag(tag); (err == nil) != ok {
			t.Errorf("ValidateShareTag(%q) = %v, want ok=%v", tag, err, ok)
		}
	}
}

func FuzzValidateTag(f *testing.F) {
	for _, s := range []string{"oracledb", "a/b", "a,b", "", "\n", strings.Repeat("x", 61), "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		err := model.ValidateTag(tag)
		if err != nil {
			return
		}
		// Whatever is accepted satisfies every stated rule.
		if tag == "" || !utf8.ValidString(tag) || utf8.RuneCountInString(tag) > model.MaxTagLength ||
			strings.ContainsAny(tag, ",/") {
			t.Fatalf("accepted %q", tag)
		}
		for _, r := range tag {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("accepted control character in %q", tag)
			}
		}
	})
}

func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(validSpec))
	f.Add([]byte(`{"name":"a","disks":[{"name":"vda","tag":"x"}]}`))
	f.Add([]byte("name: a\nnics: [{mac: '52:54:00:00:00:01', vlan: 5}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := model.ParseSpec(data)
		if err != nil {
			if !errors.Is(err, model.ErrInvalidSpec) {
				t.Fatalf("error is not a spec error: %v", err)
			}
			return
		}
		// An accepted spec is normalized and valid, and normalizing is
		// idempotent.
		if err := in.Validate(); err != nil {
			t.Fatalf("accepted spec fails Validate: %v", err)
		}
		before := *in
		in.Normalize()
		if in.UUID != before.UUID || in.Hostname != before.Hostname {
			t.Fatal("Normalize is not idempotent")
		}
		for _, d := range in.Disks {
			if d.Tag != "" && model.ValidateTag(d.Tag) != nil {
				t.Fatalf("accepted bad disk tag %q", d.Tag)
			}
		}
	})
}

// TestErrorsCutLongValues: an error names the offending value, cut to a
// readable length with its size, never echoing 70,000 bytes of user data.
func TestErrorsCutLongValues(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{
			name: "user_data over the schema limit",
			err: func() error {
				_, err := model.ParseSpec([]byte(validSpec + "user_data: " + strings.Repeat("x", 70000) + "\n"))
				return err
			}(),
			want: `user_data: "` + strings.Repeat("x", 64) + `"… (70000 bytes): `,
		},
		{
			name: "string field error",
			err:  model.FieldError{Field: "disks[0].tag", Value: strings.Repeat("ü", 80), Rule: "too long"},
			want: `disks[0].tag: "` + strings.Repeat("ü", 64) + `"… (160 bytes): too long`,
		},
		{
			name: "other value",
			err:  model.FieldError{Field: "vlan", Value: 5000, Rule: "must be between 0 and 4095"},
			want: "vlan: 5000: must be between 0 and 4095",
		},
		{
			name: "long non-string value",
			err:  model.FieldError{Field: "x", Value: []int{1234567890, 1234567890, 1234567890, 1234567890, 1234567890, 1234567890, 1234567890}, Rule: "r"},
			want: `x: "[1234567890 1234567890 1234567890 1234567890 1234567890 12345678"… (78 bytes): r`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Fatal("no error")
			}
			msg := tt.err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q\ndoes not contain %q", msg, tt.want)
			}
			if len(msg) > 400 {
				t.Errorf("error is %d bytes long", len(msg))
			}
		})
	}
}
