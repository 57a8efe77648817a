package devices

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/vmeta/vmeta/internal/model"
)

// Spec is the host's device spec (Nova's [pci] device_spec): which of the
// host's PCI devices hostctl hands to instances, under which alias, and
// how. A file holds either {"devices": [...]} or the bare list, as YAML or
// JSON:
//
//	devices:
//	  - address: "0000:3b:00.*"      # glob: * ? [..] per character
//	    alias: gpu
//	    one_time_use: true
//	  - vendor_id: "144d"
//	    product_id: "a808"
//	    alias: nvme
//	    one_time_use: true
//	    live_migratable: false
type Spec struct {
	Entries []Entry `json:"devices"`
}

// Entry is one device_spec entry: it matches devices by address (a glob)
// and/or vendor and product, and gives them an alias.
type Entry struct {
	// Address is a PCI address dddd:bb:ss.f, or a glob of one (path.Match
	// syntax: "0000:3b:*.0").
	Address string `json:"address,omitempty"`
	// VendorID and ProductID are four hex digits, as sysfs shows them
	// without "0x" ("10de"); "*" or empty matches any.
	VendorID  string `json:"vendor_id,omitempty"`
	ProductID string `json:"product_id,omitempty"`
	// Alias is the name instance specs request (pci_aliases).
	Alias string `json:"alias"`
	// OneTimeUse devices are burned (reserved = total) when claimed and
	// come back only when an operator cleans them.
	OneTimeUse bool `json:"one_time_use,omitempty"`
	// LiveMigratable is accepted and reported (vmeta has no migrations).
	LiveMigratable bool `json:"live_migratable,omitempty"`
}

var (
	aliasRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	hexID    = regexp.MustCompile(`^[0-9a-f]{4}$`)
	globChar = regexp.MustCompile(`^[0-9a-f*?\[\]\-!^]+$`)
)

// SpecError lists every problem of a device spec, each naming the entry
// and the field.
type SpecError struct {
	Source string
	Errors []model.FieldError
}

func (e *SpecError) Error() string {
	src := "device spec"
	if e.Source != "" {
		src += " " + e.Source
	}
	return "invalid " + src + ": " + model.JoinFieldErrors(e.Errors)
}

// FieldErrors are the spec's invalid fields.
func (e *SpecError) FieldErrors() []model.FieldError { return e.Errors }

// LoadSpec reads and parses the device spec file at path.
func LoadSpec(file string) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("device spec: %w", err)
	}
	s, err := ParseSpec(data)
	var se *SpecError
	if errors.As(err, &se) {
		se.Source = file
	}
	return s, err
}

// ParseSpec parses a device spec (YAML or JSON) and validates it: every
// field known, addresses PCI addresses or globs of one, ids four hex
// digits, aliases named, no entry twice, no two entries that could match
// the same device with different settings (Overlaps is the same check
// against the devices found).
func ParseSpec(data []byte) (*Spec, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, &SpecError{Errors: []model.FieldError{{Field: "(file)", Rule: "not YAML or JSON: " + err.Error()}}}
	}
	js = bytes.TrimSpace(js)
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if len(js) > 0 && js[0] == '[' {
		err = dec.Decode(&s.Entries)
	} else if len(js) > 0 && !bytes.Equal(js, []byte("null")) {
		err = dec.Decode(&s)
	}
	if err != nil {
		return nil, &SpecError{Errors: []model.FieldError{{Field: "(file)", Rule: decodeRule(err)}}}
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// decodeRule names the field of a JSON decode error.
func decodeRule(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %s: %s is not a %s", te.Field, te.Value, te.Type)
	}
	return err.Error() // "json: unknown field \"x\"" names it
}

func (s *Spec) validate() error {
	var fe []model.FieldError
	add := func(i int, field string, value any, format string, args ...any) {
		fe = append(fe, model.FieldError{Field: fmt.Sprintf("devices[%d].%s", i, field), Value: value, Rule: fmt.Sprintf(format, args...)})
	}
	for i := range s.Entries {
		e := &s.Entries[i]
		e.Address = strings.ToLower(strings.TrimSpace(e.Address))
		e.VendorID = normID(e.VendorID)
		e.ProductID = normID(e.ProductID)
		if e.Address == "" && e.VendorID == "" && e.ProductID == "" {
			add(i, "address", nil, "an entry needs address, vendor_id or product_id (it would match every device)")
		}
		if e.Address != "" {
			if err := checkAddressGlob(e.Address); err != nil {
				add(i, "address", e.Address, "%v", err)
			}
		}
		for _, f := range []struct{ name, v string }{{"vendor_id", e.VendorID}, {"product_id", e.ProductID}} {
			if f.v != "" && f.v != "*" && !hexID.MatchString(f.v) {
				add(i, f.name, f.v, "must be four hex digits (as in lspci -n: 10de), or *")
			}
		}
		if !aliasRe.MatchString(e.Alias) {
			add(i, "alias", e.Alias, "must be 1 to 64 of a-z, 0-9, _ and -, starting with a letter or digit")
		}
	}
	if len(fe) > 0 {
		return &SpecError{Errors: fe}
	}
	for i := range s.Entries {
		for j := range i {
			a, b := s.Entries[j], s.Entries[i]
			switch {
			case a.Address == b.Address && a.VendorID == b.VendorID && a.ProductID == b.ProductID:
				add(i, "address", b.Address, "duplicate of devices[%d] (same address, vendor_id and product_id)", j)
			case mayOverlap(a, b):
				field, value := "address", b.Address
				if b.Address == "" {
					field, value = "vendor_id", b.VendorID
				}
				add(i, field, value, "overlaps devices[%d] (%s): both can match the same device; make the globs or ids disjoint", j, a.describe())
			}
		}
	}
	if len(fe) > 0 {
		return &SpecError{Errors: fe}
	}
	return nil
}

func normID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	return strings.TrimPrefix(s, "0x")
}

// checkAddressGlob accepts dddd:bb:ss.f where each part is hex or a glob.
func checkAddressGlob(a string) error {
	if !strings.ContainsAny(a, "*?[") {
		if !model.IsPCIAddress(a) {
			return fmt.Errorf("is not a PCI address dddd:bb:ss.f (lower-case hex) or a glob of one")
		}
		return nil
	}
	if _, err := path.Match(a, ""); err != nil {
		return fmt.Errorf("bad glob: %w", err)
	}
	dom, rest, ok1 := strings.Cut(a, ":")
	bus, rest, ok2 := strings.Cut(rest, ":")
	slot, fn, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("is not a PCI address glob domain:bus:slot.function (e.g. 0000:3b:*.0)")
	}
	for _, p := range []string{dom, bus, slot, fn} {
		if p == "" || !globChar.MatchString(p) {
			return fmt.Errorf("part %q is neither hex digits nor a glob of them", p)
		}
	}
	return nil
}

// mayOverlap reports whether two entries surely match a common device
// when it exists: their ids do not exclude each other and their addresses
// are equal (or both absent), or one's glob matches the other's address.
// The rest (two globs, an address entry and an id-only one) is checked
// against the devices found (Spec.Match).
func mayOverlap(a, b Entry) bool {
	idsMeet := func(x, y string) bool { return x == "" || y == "" || x == "*" || y == "*" || x == y }
	if !idsMeet(a.VendorID, b.VendorID) || !idsMeet(a.ProductID, b.ProductID) {
		return false
	}
	switch {
	case a.Address == "" || b.Address == "":
		return a.Address == b.Address
	case a.Address == b.Address:
		return true
	case !isGlob(a.Address) && !isGlob(b.Address):
		return false
	case !isGlob(a.Address):
		ok, _ := path.Match(b.Address, a.Address)
		return ok
	case !isGlob(b.Address):
		ok, _ := path.Match(a.Address, b.Address)
		return ok
	}
	return false
}

func isGlob(s string) bool { return strings.ContainsAny(s, "*?[") }

// Matches reports whether the entry matches a device.
func (e Entry) Matches(d Found) bool {
	if e.VendorID != "" && e.VendorID != "*" && e.VendorID != d.VendorID {
		return false
	}
	if e.ProductID != "" && e.ProductID != "*" && e.ProductID != d.ProductID {
		return false
	}
	if e.Address != "" {
		ok, _ := path.Match(e.Address, d.Address)
		return ok
	}
	return true
}

func (e Entry) describe() string {
	var parts []string
	if e.Address != "" {
		parts = append(parts, "address "+e.Address)
	}
	if e.VendorID != "" {
		parts = append(parts, "vendor_id "+e.VendorID)
	}
	if e.ProductID != "" {
		parts = append(parts, "product_id "+e.ProductID)
	}
	return strings.Join(parts, ", ")
}

// Aliases returns the set of aliases the spec names.
func (s *Spec) Aliases() map[string]bool {
	m := map[string]bool{}
	for _, e := range s.Entries {
		m[e.Alias] = true
	}
	return m
}

// Match pairs each found device with the entry that matches it (devices
// no entry matches are left out). Two entries matching one device is an
// error naming both and the device: the spec would be ambiguous.
func (s *Spec) Match(found []Found) ([]Matched, error) {
	var out []Matched
	var fe []model.FieldError
	for _, d := range found {
		idx := -1
		for i, e := range s.Entries {
			if !e.Matches(d) {
				continue
			}
			if idx >= 0 {
				fe = append(fe, model.FieldError{Field: fmt.Sprintf("devices[%d]", i), Value: d.Address,
					Rule: fmt.Sprintf("matches the same device as devices[%d]; make the entries disjoint", idx)})
				continue
			}
			idx = i
		}
		if idx >= 0 {
			out = append(out, Matched{Found: d, Entry: s.Entries[idx]})
		}
	}
	if len(fe) > 0 {
		return nil, &SpecError{Errors: fe}
	}
	return out, nil
}

// Matched is a found device and the spec entry that matched it.
type Matched struct {
	Found
	Entry Entry
}
