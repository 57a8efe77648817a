package model_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/model"
)

func nested(open, close string, n int) string {
	return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
}

// TestSpecBounds: the free-form parts of a spec (vendor_data, meta,
// user_data, files, anything of any shape) are bounded in depth and size,
// and the fields that come straight from the author (meta text, MACs,
// sizes, CPU ids, the image) in value. Each refusal names the field, the
// value and the rule with its limit.
func TestSpecBounds(t *testing.T) {
	many := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return strings.Join(parts, ", ")
	}
	tests := []struct {
		name, spec string
		field      string // "" : accepted
		rule       string
	}{
		{"9,000 levels of vendor_data (JSON)", `{"name":"a","vendor_data":` + nested(`{"a":`, `}`, 9000) + `}`, "vendor_data.a.a", "more than 32 levels"},
		{"9,000 levels of vendor_data (YAML flow)", "name: a\nvendor_data: " + nested("{a: ", "}", 9000) + "\n", "vendor_data.a.a", "more than 32 levels"},
		{"deep arrays in vendor_data", `{"name":"a","vendor_data":{"x":` + nested(`[`, `]`, 100) + `}}`, "vendor_data.x[0][0]", "more than 32 levels"},
		{"vendor_data at the depth limit", `{"name":"a","vendor_data":` + nested(`{"a":`, `}`, 31) + `}`, "", ""},
		{"vendor_data one level over", `{"name":"a","vendor_data":` + nested(`{"a":`, `}`, 32) + `}`, "vendor_data.a.a", "more than 32 levels"},
		{"wide vendor_data", `{"name":"a","vendor_data":{` + many(5000, func(i int) string { return fmt.Sprintf(`"k%d":"%s"`, i, strings.Repeat("v", 10)) }) + `}}`, "vendor_data", "at most 65535 bytes"},
		{"129 meta items", `{"name":"a","meta":{` + many(129, func(i int) string { return fmt.Sprintf(`"k%d":"v"`, i) }) + `}}`, "meta", "at most 128 items"},
		{"128 meta items", `{"name":"a","meta":{` + many(128, func(i int) string { return fmt.Sprintf(`"k%d":"v"`, i) }) + `}}`, "", ""},
		{"user_data over 65535 bytes (in fewer characters)", `{"name":"a","user_data":"` + strings.Repeat("é", 40000) + `"}`, "user_data", "at most 65535 bytes"},
		{"files over 256 KiB together", `{"name":"a","files":[` + many(5, func(i int) string {
			return fmt.Sprintf(`{"path":"/f%d","content":"%s"}`, i, strings.Repeat("x", 60<<10))
		}) + `]}`, "files", "at most 262144 bytes"},

		{"meta value with NUL", `{"name":"a","meta":{"k":"a\u0000b"}}`, "meta.k", "control characters"},
		{"meta value with ESC", `{"name":"a","meta":{"k":"\u001b[31mred"}}`, "meta.k", "control characters"},
		{"meta value with a bidi override", `{"name":"a","meta":{"k":"txt.\u202egpj"}}`, "meta.k", "bidirectional"},
		{"meta key with ESC", `{"name":"a","meta":{"\u001b]0;x":"v"}}`, "meta", "key must not contain control characters"},
		{"meta key with a bidi isolate", `{"name":"a","meta":{"a\u2066b":"v"}}`, "meta", "key must not contain bidirectional"},
		{"meta in any language", `{"name":"a","meta":{"名前":"مرحبا"}}`, "", ""},
		{"tag with a bidi override", `{"name":"a","disks":[{"name":"vda","tag":"db\u202e"}]}`, "disks[0].tag", "bidirectional"},

		{"multicast MAC", "name: a\nnics: [{mac: \"01:00:5e:00:00:01\"}]\n", "nics[0].mac", "unicast"},
		{"broadcast MAC", "name: a\nnics: [{mac: \"ff:ff:ff:ff:ff:ff\"}]\n", "nics[0].mac", "unicast"},
		{"zero MAC", "name: a\nnics: [{mac: \"00:00:00:00:00:00\"}]\n", "nics[0].mac", "unicast"},
		{"locally administered unicast MAC", "name: a\nnics: [{mac: \"52:54:00:00:00:01\"}]\n", "", ""},

		{"absurd size", "name: a\ndisks: [{name: vdb, size: 99999999999999999999999999T}]\n", "disks[0].size", "at most 1125899906842624 bytes"},
		{"size just over 1P", "name: a\ndisks: [{name: vdb, size: 1025T}]\n", "disks[0].size", "at most"},
		{"size of 1P", "name: a\ndisks: [{name: vdb, size: 1024T}]\n", "", ""},
		{"absurd CPU id", "name: a\ndedicated_cpus: [2, 99999999999]\n", "dedicated_cpus[1]", "from 0 to 8191"},
		{"last CPU id", "name: a\ndedicated_cpus: [8191]\n", "", ""},

		{"image climbing out", "name: a\nimage: ../../etc/passwd\n", "image", "image directory"},
		{"image absolute", "name: a\nimage: /etc/shadow\n", "image", "image directory"},
		{"image hidden", "name: a\nimage: .sidecar\n", "image", "image directory"},
		{"image with a backslash", "name: a\nimage: 'a\\b'\n", "image", "image directory"},
		{"image name", "name: a\nimage: debian-12.qcow2\n", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := model.ParseSpec([]byte(tt.spec))
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var se *model.SpecError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a spec error on %s", err, tt.field)
			}
			for _, fe := range se.Errors {
				if (fe.Field == tt.field || strings.HasSuffix(tt.field, ".a.a") && strings.HasPrefix(fe.Field, tt.field) || strings.HasSuffix(tt.field, "[0][0]") && strings.HasPrefix(fe.Field, tt.field)) && strings.Contains(fe.Rule, tt.rule) {
					if msg := err.Error(); len(msg) > 1024 {
						t.Errorf("the message is %d bytes long", len(msg))
					}
					return
				}
			}
			t.Errorf("err = %.500v\nwant field %s, rule containing %q", err, tt.field, tt.rule)
		})
	}
}

// TestDeepSpecRefusedQuickly: the deepest spec the YAML reader takes
// costs no more than a flat one of its size to refuse (the depth check
// reads tokens, stopping at the limit). Timing is printed, not asserted.
func TestDeepSpecRefusedQuickly(t *testing.T) {
	spec := `{"name":"a","vendor_data":` + nested(`{"a":`, `}`, 9000) + `}`
	start := time.Now()
	_, err := model.ParseSpec([]byte(spec))
	if !errors.Is(err, model.ErrInvalidSpec) {
		t.Fatalf("err = %v", err)
	}
	t.Logf("%d-byte spec nested 9,000 levels refused in %v", len(spec), time.Since(start))
}

// TestWideSpecRefusedCheaply: a 900 KB JSON spec of small objects in
// vendor_data is refused before the YAML reader (120 MB of allocations
// for it) sees it: the allocations are printed and bounded.
func TestWideSpecRefusedCheaply(t *testing.T) {
	var wide strings.Builder
	wide.WriteString(`{"name":"wide","vendor_data":{`)
	for i := 0; wide.Len() < 900<<10; i++ {
		if i > 0 {
			wide.WriteByte(',')
		}
		fmt.Fprintf(&wide, `"k%d":{"a":[1,{"b":[2]}]}`, i)
	}
	wide.WriteString("}}")
	spec := []byte(wide.String())
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, err := model.ParseSpec(spec)
	runtime.ReadMemStats(&m1)
	if err == nil || !strings.Contains(err.Error(), "at most 65535 bytes") {
		t.Fatalf("err = %.300v", err)
	}
	alloc := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("a %d-byte spec refused with %d KiB allocated", len(spec), alloc>>10)
	if alloc > 40<<20 {
		t.Errorf("refusing a %d-byte spec allocated %d MiB", len(spec), alloc>>20)
	}
	// Indentation does not count: 60 KB of vendor_data, pretty-printed.
	pretty := `{"name":"a","vendor_data":{` + "\n" + strings.Repeat(`    "k": "`+strings.Repeat("v", 60000)+`"`, 1) + "\n" + strings.Repeat(" ", 10000) + `}}`
	if _, err := model.ParseSpec([]byte(pretty)); err != nil {
		t.Errorf("60 KB of vendor_data, indented: %.300v", err)
	}
}

// FuzzParseDiskSize: every accepted size is at most MaxDiskSize, and
// is what the string says.
func FuzzParseDiskSize(f *testing.F) {
	for _, s := range []string{"10G", "1", "99999999999999999999999999T", "1024T", "0K", "", "G", "1.5G", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := model.ParseDiskSize(s)
		if err != nil {
			return
		}
		if n < 0 || n > model.MaxDiskSize {
			t.Fatalf("ParseDiskSize(%q) = %d: out of bounds", s, n)
		}
		if model.CheckDiskSize(s) != nil {
			t.Fatalf("CheckDiskSize(%q) disagrees", s)
		}
	})
}

// FuzzSpecDepth: a vendor_data nested deeper than the limit allows is
// refused, and one within it is never refused for its depth.
func FuzzSpecDepth(f *testing.F) {
	f.Add(`{"a":[[{"b":1}]]}`)
	f.Add(`{"k":"v","l":[1,2,{"m":null}]}`)
	f.Add(`{"a":` + nested(`[`, `]`, 40) + `}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var v any
		if json.Unmarshal([]byte(doc), &v) != nil {
			return
		}
		if _, ok := v.(map[string]any); !ok {
			return
		}
		_, err := model.ParseSpec([]byte(`{"name":"a","vendor_data":` + doc + `}`))
		d := 1 + depthOf(v) // the document is level 1
		tooDeep := err != nil && strings.Contains(err.Error(), "levels deep")
		switch {
		case d > model.MaxSpecDepth && !tooDeep:
			t.Fatalf("a spec %d levels deep: err = %v", d, err)
		case d <= model.MaxSpecDepth && tooDeep:
			t.Fatalf("a spec %d levels deep refused for its depth: %v", d, err)
		}
	})
}

// depthOf counts the nested objects and arrays of a decoded JSON value.
func depthOf(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
	case []any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
	default:
		return 0
	}
	return d + 1
}
