package schema_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/vmeta/vmeta/schema"
	"github.com/vmeta/vmeta/schema/check"
)

// agree fails t unless package schema (jsonschema, the authority) and
// package check (the generated validator the guest agent uses) give the
// same verdict on data under every device kind: both accept, or both
// refuse with an *Error (the same pointers), or both fail to decode.
func agree(t testing.TB, what string, data []byte) (valid bool) {
	t.Helper()
	for _, k := range deviceKinds {
		want := schema.ValidateJSON(k, data)
		got := check.ValidateJSON(k, data)
		var we, ge *schema.Error
		wantRefused, gotRefused := errors.As(want, &we), errors.As(got, &ge)
		switch {
		case (want == nil) != (got == nil) || wantRefused != gotRefused:
			t.Fatalf("%s under %s: jsonschema says %v, check says %v:\n%s", what, k, want, got, data)
		case wantRefused && !reflect.DeepEqual(pointers(we), pointers(ge)):
			t.Fatalf("%s under %s: jsonschema refuses at %q (%v), check at %q (%v):\n%s", what, k, pointers(we), we, pointers(ge), ge, data)
		}
		if k == schema.DevicesV12 {
			valid = want == nil
		}
	}
	return valid
}

// pointers are the distinct pointers of an error's violations, sorted
// (violations order "/0" and "/00" alike, so their order may differ).
func pointers(e *schema.Error) []string {
	var out []string
	for _, v := range e.Violations {
		out = append(out, v.Pointer)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestCheckAgreesWithSchema: the guest agent's generated validator and
// the jsonschema authority accept and refuse exactly the same documents,
// over the append-only corpus of generated documents (randomDoc, the
// corpus TestAppendOnly draws), the specification's examples and the
// golden meta_data.json documents internal/metadata renders.
func TestCheckAgreesWithSchema(t *testing.T) {
	r := rand.New(rand.NewPCG(2016, 630))
	valid := 0
	const n = 5000
	for range n {
		data, err := json.Marshal(randomDoc(r))
		if err != nil {
			t.Fatal(err)
		}
		if agree(t, "generated document", data) {
			valid++
		}
	}
	if valid < n/10 || valid > n-n/10 {
		t.Errorf("%d of %d generated documents valid: the corpus should hold both kinds", valid, n)
	}
	files, _ := filepath.Glob("testdata/spec-example-*.json")
	golden, _ := filepath.Glob("../internal/metadata/testdata/golden/openstack/*/meta_data.json")
	if len(files) == 0 || len(golden) == 0 {
		t.Fatalf("no documents: %d spec examples, %d golden", len(files), len(golden))
	}
	for _, f := range append(files, golden...) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(raw, &top); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		devs, ok := top["devices"]
		if !ok {
			continue
		}
		agree(t, f, []byte(`{"devices":`+string(devs)+`}`))
		agree(t, f+" whole", raw) // other keys: both refuse
	}
	for _, s := range []string{``, `{`, `null`, `[]`, `{"devices":[]} x`, `{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","vlan":1.0}]}`,
		`{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","vlan":1e2}]}`, `{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","vlan":4095.5}]}`,
		`{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","vlan":4.095e3}]}`, `{"devices":[{"type":"nic","bus":"pci","mac":"fa:16:3e:00:00:01","vlan":-0}]}`,
		`{"devices":[{"type":"disk","bus":"none","address":"none","tags":["é"]}]}`, `{"devices":[{"type":"pci","bus":"pci","address":"0000:00:02.0","tags":[]}]}`} {
		agree(t, "literal", []byte(s))
	}
}

// FuzzCheckAgreesWithSchema: on any input, the generated validator and
// the jsonschema authority agree (see agree).
func FuzzCheckAgreesWithSchema(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 64 {
		data, err := json.Marshal(randomDoc(r))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"devices":[{"type":"share","bus":"none","address":"none","share_id":"1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e","tag":"data"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		agree(t, "fuzz input", data)
	})
}

// TestCheckValidateValues: check.Validate takes decoded values as
// schema.Validate does, float64 numbers included, and refuses a value
// that is not JSON with an ordinary error.
func TestCheckValidateValues(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for range 500 {
		doc := randomDoc(r)
		for _, k := range deviceKinds {
			if want, got := schema.Validate(k, doc) == nil, check.Validate(k, doc) == nil; want != got {
				t.Fatalf("%s: schema valid=%v, check valid=%v: %v", k, want, got, doc)
			}
		}
	}
	err := check.Validate(schema.DevicesV12, map[string]any{"devices": []any{struct{}{}}})
	var se *schema.Error
	if err == nil || errors.As(err, &se) {
		t.Errorf("a Go struct in the document: got %v, want an ordinary error", err)
	}
	if err := check.Validate(schema.InstanceSpec, map[string]any{}); err == nil {
		t.Error("check.Validate(InstanceSpec) = nil, want unknown kind")
	}
}
