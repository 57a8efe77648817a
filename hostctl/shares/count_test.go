package shares

import (
	"slices"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// TestCountMappings: the mappings of every host, counted by host and
// status as the metrics export them, follow their status changes.
func TestCountMappings(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			st := open(t)
			if got, err := CountMappings(ctx, st); err != nil || len(got) != 0 {
				t.Fatalf("no mappings: %v, %v", got, err)
			}
			var ms []*Mapping
			for _, m := range []Mapping{
				{Instance: "u-1", InstanceName: "one", Host: "h1", ShareID: "s-1", Tag: "a", Status: types.ShareAttaching},
				{Instance: "u-1", InstanceName: "one", Host: "h1", ShareID: "s-2", Tag: "b", Status: types.ShareAttaching},
				{Instance: "u-2", InstanceName: "two", Host: "h1", ShareID: "s-1", Tag: "a", Status: types.ShareAttaching},
				{Instance: "u-3", InstanceName: "three", Host: "h2", ShareID: "s-1", Tag: "a", Status: types.ShareAttaching},
			} {
				if err := createMapping(ctx, st, &m); err != nil {
					t.Fatal(err)
				}
				ms = append(ms, &m)
			}
			if err := transition(ctx, st, ms[0], types.ShareError, "mount failed", types.ShareAttaching); err != nil {
				t.Fatal(err)
			}
			if err := transition(ctx, st, ms[1], types.ShareInactive, "", types.ShareAttaching); err != nil {
				t.Fatal(err)
			}
			if err := transition(ctx, st, ms[3], types.ShareError, "mount failed", types.ShareAttaching); err != nil {
				t.Fatal(err)
			}
			got, err := CountMappings(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			want := []MappingCount{
				{Host: "h1", Status: types.ShareAttaching, Count: 1},
				{Host: "h1", Status: types.ShareError, Count: 1},
				{Host: "h1", Status: types.ShareInactive, Count: 1},
				{Host: "h2", Status: types.ShareError, Count: 1},
			}
			if !slices.Equal(got, want) {
				t.Fatalf("counts %+v, want %+v", got, want)
			}
		})
	}
}
