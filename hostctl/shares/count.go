package shares

import (
	"cmp"
	"context"
	"slices"
)

// MappingCount is how many share mappings of one host are in one status.
type MappingCount struct {
	Host   string
	Status string
	Count  int
}

// CountMappings counts every host's share mappings by owning host and
// status (types.ShareAttaching, …, types.ShareError), sorted by host and
// status: one listing of the mapping records, for the metrics a scrape
// reads (hostctl/metrics). A mapping recorded without a host (before
// mappings kept one) counts under "".
func CountMappings(ctx context.Context, st Records) ([]MappingCount, error) {
	ms, err := mappings(ctx, st, "")
	if err != nil {
		return nil, err
	}
	type key struct{ host, status string }
	n := map[key]int{}
	for _, m := range ms {
		n[key{m.Host, m.Status}]++
	}
	out := make([]MappingCount, 0, len(n))
	for k, c := range n {
		out = append(out, MappingCount{Host: k.host, Status: k.status, Count: c})
	}
	slices.SortFunc(out, func(a, b MappingCount) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Status, b.Status))
	})
	return out, nil
}
