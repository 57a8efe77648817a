package schema_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/schema"
)

// absent marks a field left out of a generated device.
type absentT struct{}

var absent absentT

// A pool holds the values a generated field takes: valid ones, drawn most
// of the time, and near misses.
type pool struct{ ok, bad []any }

var (
	typePool = pool{[]any{"nic", "disk", "share", "pci"}, []any{"gpu", "NIC", "", 1.0, absent}}
	busPool  = pool{[]any{"pci", "scsi", "ide", "usb", "xen", "none"}, []any{"virtio", "PCI", "pcix", "", 0.0, absent}}
	addrPool = map[any]pool{
		"pci":  {[]any{"0000:00:02.0", "0000:00:1f.7", "ffff:ff:ff.f"}, []any{"0000:00:02", "xx0000:00:02.0yy", "0000:00:02.0\n", "0000:00:02x0", "0000:00:02.F", "1:0:2:0"}},
		"usb":  {[]any{"1:0", "a:b", "10:ff"}, []any{"1:A", "1", "1:0:0", ":1"}},
		"scsi": {[]any{"1:0:2:0", "0:0:a:1f"}, []any{"1:0:2", "1:0:2:0:0", "1:0:2:G"}},
		"ide":  {[]any{"0:0", "0:1", "1:1"}, []any{"2:0", "0:2", "00:0", "0"}},
		"xen":  {[]any{"0", "1", "001200", "51712"}, []any{"xvda", "-1", "1.0"}},
		"none": {nil, []any{"0", "0000:00:02.0", "None"}},
	}
	addrAny      = pool{[]any{"none", absent}, []any{"", 5.0, nil}}
	macPool      = pool{[]any{"fa:16:3e:00:00:01", "AA:BB:CC:DD:EE:FF"}, []any{"01:22:22:42:22", "01-22-22-42-22-21", "fa:16:3e:00:00:01:02", "", 7.0, absent}}
	tagsPool     = pool{[]any{[]any{"a"}, []any{"a", "b"}, []any{}}, []any{[]any{""}, "a", []any{1.0}, nil}}
	devnamePool  = pool{[]any{"eth0", ""}, []any{1.0, nil}}
	vlanPool     = pool{[]any{0.0, 100.0, 4095.0}, []any{4096.0, -1.0, 1.5, "1"}}
	boolPool     = pool{[]any{true, false}, []any{"true", "True", 1.0, nil}}
	serialPool   = pool{[]any{"disk-vol-1", ""}, []any{1.0, false}}
	pathPool     = pool{[]any{"/dev/sda", "/"}, []any{"dev/sda", "", 1.0}}
	shareIDPool  = pool{[]any{"1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e", "1F5A1F4E-7A4B-4C1E-9B0E-2F3A4B5C6D7E"}, []any{"share-1", "1f5a1f4e7a4b4c1e9b0e2f3a4b5c6d7e", "1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7", absent}}
	shareTagPool = pool{[]any{"data", "Data-2", strings.Repeat("a", 255)}, []any{"a_b", "", strings.Repeat("a", 256), absent}}
	extraKeys    = []string{"mac", "devname", "vlan", "vf_trusted", "serial", "path", "tags", "encrypted", "share_id", "tag", "size"}
)

func pick(r *rand.Rand, p pool) any {
	if len(p.ok) > 0 && r.IntN(8) > 0 {
		return p.ok[r.IntN(len(p.ok))]
	}
	return p.bad[r.IntN(len(p.bad))]
}

func set(m map[string]any, k string, v any) {
	if v != absent {
		m[k] = v
	}
}

// randomDevice builds a device mostly shaped like its type, with values
// drawn from the pools and, now and then, a field from another type.
func randomDevice(r *rand.Rand) any {
	if r.IntN(50) == 0 {
		return "nic"
	}
	d := map[string]any{}
	typ := pick(r, typePool)
	set(d, "type", typ)
	bus := pick(r, busPool)
	set(d, "bus", bus)
	if p, ok := addrPool[bus]; ok && r.IntN(2) == 0 {
		set(d, "address", pick(r, p))
	} else {
		set(d, "address", pick(r, addrAny))
	}
	maybe := func(k string, p pool) {
		if r.IntN(2) == 0 {
			set(d, k, pick(r, p))
		}
	}
	switch typ {
	case "nic":
		set(d, "mac", pick(r, macPool))
		maybe("tags", tagsPool)
		maybe("devname", devnamePool)
		maybe("vlan", vlanPool)
		maybe("vf_trusted", boolPool)
	case "disk":
		maybe("serial", serialPool)
		maybe("path", pathPool)
		maybe("tags", tagsPool)
		maybe("encrypted", boolPool)
	case "share":
		if r.IntN(4) > 0 {
			d["bus"], d["address"] = "none", "none"
		}
		set(d, "share_id", pick(r, shareIDPool))
		set(d, "tag", pick(r, shareTagPool))
	case "pci":
		if r.IntN(4) > 0 {
			d["bus"] = "pci"
			set(d, "address", pick(r, addrPool["pci"]))
		}
		if r.IntN(6) > 0 {
			set(d, "tags", pick(r, tagsPool))
		}
	}
	if r.IntN(20) == 0 {
		k := extraKeys[r.IntN(len(extraKeys))]
		d[k] = []any{"x", true, 1.0, []any{"x"}}[r.IntN(4)]
	}
	return d
}

func randomDoc(r *rand.Rand) any {
	devs := make([]any, r.IntN(4))
	for i := range devs {
		devs[i] = randomDevice(r)
	}
	doc := map[string]any{"devices": devs}
	switch r.IntN(40) {
	case 0:
		delete(doc, "devices")
	case 1:
		doc["extra"] = true
	}
	return doc
}

// Every document 1.0 accepts, 1.1 accepts, and every document 1.1
// accepts, 1.2 accepts; and all three agree with a direct Go reading of
// the rules (the oracle below), so the schemas constrain what the prose
// says and nothing else.
func TestAppendOnly(t *testing.T) {
	r := rand.New(rand.NewPCG(2016, 630))
	const n = 3000
	var validV1, validV11, validV12 int
	for i := range n {
		doc := randomDoc(r)
		data, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		okV1 := schema.Validate(schema.DevicesV1, doc) == nil
		okV11 := schema.Validate(schema.DevicesV11, doc) == nil
		okV12 := schema.Validate(schema.DevicesV12, doc) == nil
		if okV11 && !okV12 {
			t.Fatalf("doc %d: accepted by 1.1, rejected by 1.2: %s\n%v", i, data, schema.Validate(schema.DevicesV12, doc))
		}
		if want := oracleDoc(doc, 2); okV12 != want {
			t.Fatalf("doc %d: 1.2 accepts=%v, oracle says %v: %s\n%v", i, okV12, want, data, schema.Validate(schema.DevicesV12, doc))
		}
		if got := schema.ValidateJSON(schema.DevicesV12, data) == nil; got != okV12 {
			t.Fatalf("doc %d: 1.2 ValidateJSON=%v, Validate=%v: %s", i, got, okV12, data)
		}
		if okV12 {
			validV12++
		}
		if okV1 && !okV11 {
			t.Fatalf("doc %d: accepted by 1.0, rejected by 1.1: %s\n%v", i, data, schema.Validate(schema.DevicesV11, doc))
		}
		if want := oracleDoc(doc, 0); okV1 != want {
			t.Fatalf("doc %d: 1.0 accepts=%v, oracle says %v: %s\n%v", i, okV1, want, data, schema.Validate(schema.DevicesV1, doc))
		}
		if want := oracleDoc(doc, 1); okV11 != want {
			t.Fatalf("doc %d: 1.1 accepts=%v, oracle says %v: %s\n%v", i, okV11, want, data, schema.Validate(schema.DevicesV11, doc))
		}
		// Decoding with json.Number must not change the verdict.
		if got := schema.ValidateJSON(schema.DevicesV11, data) == nil; got != okV11 {
			t.Fatalf("doc %d: ValidateJSON=%v, Validate=%v: %s", i, got, okV11, data)
		}
		if okV1 {
			validV1++
		}
		if okV11 {
			validV11++
		}
	}
	t.Logf("%d documents: %d valid under 1.0, %d under 1.1, %d under 1.2", n, validV1, validV11, validV12)
	if validV1 < n/10 || validV11-validV1 < n/50 || validV12-validV11 < n/50 {
		t.Errorf("generator too skewed: %d valid under 1.0, %d under 1.1, %d under 1.2", validV1, validV11, validV12)
	}
}

// 1.2 is strictly larger than 1.1: a tagged pci device.
func TestV12StrictlyLarger(t *testing.T) {
	doc := `{"devices":[{"type":"pci","bus":"pci","address":"0000:07:00.0","tags":["gpu"]}]}`
	if err := schema.ValidateJSON(schema.DevicesV12, []byte(doc)); err != nil {
		t.Fatalf("1.2 rejects: %v", err)
	}
	for _, k := range []schema.Kind{schema.DevicesV1, schema.DevicesV11} {
		if schema.ValidateJSON(k, []byte(doc)) == nil {
			t.Fatalf("%s accepts", k)
		}
	}
}

// 1.1 is strictly larger than 1.0.
func TestV11StrictlyLarger(t *testing.T) {
	for name, doc := range map[string]string{
		"share":     `{"devices":[{"type":"share","bus":"none","address":"none","share_id":"1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e","tag":"data"}]}`,
		"encrypted": `{"devices":[{"type":"disk","bus":"pci","encrypted":false}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := schema.ValidateJSON(schema.DevicesV11, []byte(doc)); err != nil {
				t.Fatalf("1.1 rejects: %v", err)
			}
			if schema.ValidateJSON(schema.DevicesV1, []byte(doc)) == nil {
				t.Fatal("1.0 accepts")
			}
		})
	}
}

// The oracle: the rules of the corrected schema, written out in Go.
var (
	oracleAddr = map[string]*regexp.Regexp{
		"pci":  regexp.MustCompile(`\A[a-f0-9]{4}:[a-f0-9]{2}:[a-f0-9]{2}\.[a-f0-9]\z`),
		"usb":  regexp.MustCompile(`\A[a-f0-9]+:[a-f0-9]+\z`),
		"scsi": regexp.MustCompile(`\A[a-f0-9]+:[a-f0-9]+:[a-f0-9]+:[a-f0-9]+\z`),
		"ide":  regexp.MustCompile(`\A[01]:[01]\z`),
		"xen":  regexp.MustCompile(`\A[0-9]+\z`),
		"none": nil, // no address, or "none"
	}
	oracleMAC      = regexp.MustCompile(`\A(?i:[0-9a-f]{2}(:[0-9a-f]{2}){5})\z`)
	oracleUUID     = regexp.MustCompile(`\A(?i:[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12})\z`)
	oracleShareTag = regexp.MustCompile(`\A[a-zA-Z0-9-]{1,255}\z`)
)

// oracleDoc checks doc under 1.0 (ver 0), 1.1 (1) or 1.2 (2).
func oracleDoc(doc any, ver int) bool {
	m, ok := doc.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	devs, ok := m["devices"].([]any)
	if !ok {
		return false
	}
	for _, d := range devs {
		if !oracleDevice(d, ver) {
			return false
		}
	}
	return true
}

func oracleDevice(dev any, ver int) bool {
	v11 := ver >= 1
	d, ok := dev.(map[string]any)
	if !ok {
		return false
	}
	str := func(k string) (string, bool) { s, ok := d[k].(string); return s, ok }
	typ, ok1 := str("type")
	bus, ok2 := str("bus")
	if !ok1 || !ok2 {
		return false
	}
	re, ok := oracleAddr[bus]
	if !ok {
		return false
	}
	if a, present := d["address"]; present {
		s, ok := a.(string)
		if !ok || (s != "none" && (re == nil || !re.MatchString(s))) {
			return false
		}
	}
	allowed := []string{"type", "bus", "address"}
	switch {
	case typ == "nic":
		allowed = append(allowed, "mac", "devname", "tags", "vlan", "vf_trusted")
		if mac, ok := str("mac"); !ok || !oracleMAC.MatchString(mac) {
			return false
		}
		if v, ok := d["devname"]; ok {
			if _, ok := v.(string); !ok {
				return false
			}
		}
		if v, ok := d["vlan"]; ok {
			f, ok := v.(float64)
			if !ok || f != math.Trunc(f) || f < 0 || f > 4095 {
				return false
			}
		}
		if !optionalBool(d, "vf_trusted") {
			return false
		}
	case typ == "disk":
		allowed = append(allowed, "serial", "path", "tags")
		if v11 {
			allowed = append(allowed, "encrypted")
		}
		if v, ok := d["serial"]; ok {
			if _, ok := v.(string); !ok {
				return false
			}
		}
		if v, ok := d["path"]; ok {
			if s, ok := v.(string); !ok || !strings.HasPrefix(s, "/") {
				return false
			}
		}
		if !optionalBool(d, "encrypted") {
			return false
		}
	case typ == "share" && v11:
		allowed = append(allowed, "share_id", "tag")
		id, ok1 := str("share_id")
		tag, ok2 := str("tag")
		addr, ok3 := str("address")
		if !ok1 || !ok2 || !ok3 || bus != "none" || addr != "none" || !oracleUUID.MatchString(id) || !oracleShareTag.MatchString(tag) {
			return false
		}
	case typ == "pci" && ver >= 2:
		allowed = append(allowed, "tags")
		tags, ok := d["tags"].([]any)
		if _, ok3 := str("address"); !ok || len(tags) == 0 || bus != "pci" || !ok3 {
			return false
		}
	default:
		return false
	}
	if v, ok := d["tags"]; ok {
		tags, ok := v.([]any)
		if !ok {
			return false
		}
		for _, t := range tags {
			if s, ok := t.(string); !ok || s == "" {
				return false
			}
		}
	}
	for k := range d {
		if !slices.Contains(allowed, k) {
			return false
		}
	}
	return true
}

func optionalBool(d map[string]any, k string) bool {
	v, ok := d[k]
	if !ok {
		return true
	}
	_, ok = v.(bool)
	return ok
}
