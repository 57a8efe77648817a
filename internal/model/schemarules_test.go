package model_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
)

// TestParseSpecListsEveryProblem: a spec with a schema error is refused
// with its rule errors too (the README promises every problem listed):
// the rules run on what the schema accepted, a value the schema refused
// is reported once (by the schema), and the fields keep their indexes.
func TestParseSpecListsEveryProblem(t *testing.T) {
	tests := []struct {
		name string
		spec string
		want []string // fields, each named by exactly one error
		not  []string // fields no error names
	}{
		{
			name: "schema type error beside rule errors",
			spec: `
name: db-1
disks:
  - {name: vda, tag: data}
  - {name: vdb, tag: data}
nics:
  - {mac: "52:54:00:aa:bb:01", vlan: high}
  - {mac: "52:54:00:aa:bb:01"}
`,
			want: []string{"nics[0].vlan", "disks[1].tag", "nics[1].mac"},
		},
		{
			name: "an element the schema refused keeps the others' indexes",
			spec: `
name: db-1
disks:
  - {name: vda, tag: data}
  - "vdb"
  - {name: vdc, tag: data}
`,
			want: []string{"disks[1]", "disks[2].tag"},
			not:  []string{"disks[1].name", "disks[1].tag"},
		},
		{
			name: "missing name: the schema's error, not the rule's too",
			spec: `
disks: [{name: vda}, {name: vda}]
`,
			want: []string{"(document)", "disks[1].name"},
			not:  []string{"name"},
		},
		{
			name: "a value both refuse is reported once",
			spec: `
name: db-1
uuid: 1234
nics:
  - {mac: "52:54:00:AA:BB"}
disks:
  - {name: vda, bus: virtio, address: "0000:00:04.0"}
  - {name: vdb, bus: virtio, address: "0000:00:04.0"}
`,
			want: []string{"uuid", "nics[0].mac", "disks[1].address"},
		},
		{
			name: "unknown field beside a rule error",
			spec: `
name: db-1
colour: blue
disks:
  - {name: vda}
  - {name: vda}
`,
			want: []string{"colour", "disks[1].name"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := model.ParseSpec([]byte(tt.spec))
			var se *model.SpecError
			if !errors.As(err, &se) {
				t.Fatalf("not a *SpecError: %v", err)
			}
			var fields []string
			for _, fe := range se.Errors {
				fields = append(fields, fe.Field)
			}
			for _, f := range tt.want {
				if n := count(fields, f); n != 1 {
					t.Errorf("%d errors name %s, want 1: %v", n, f, err)
				}
			}
			for _, f := range tt.not {
				if slices.Contains(fields, f) {
					t.Errorf("an error names %s: %v", f, err)
				}
			}
		})
	}
}

func count(fields []string, f string) int {
	n := 0
	for _, x := range fields {
		if x == f || (f == "(document)" && strings.HasPrefix(x, f)) {
			n++
		}
	}
	return n
}
