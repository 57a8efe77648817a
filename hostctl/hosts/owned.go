package hosts

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/internal/store"
)

// Owns reports whether an instance whose record names owner (its Host)
// is host's to manage: owner is host, or "" (a record written before
// hosts were tracked: it belongs to whichever host touches it next), or
// hosts are not tracked (host "").
func Owns(host, owner string) bool {
	return owner == "" || host == "" || owner == host
}

// Instances lists the instance records of the store.
type Instances interface {
	Instances(ctx context.Context) ([]store.Instance, error)
}

// HostCounter is a store that counts instance records by host without
// decoding them (the embedded store).
type HostCounter interface {
	InstanceHosts(ctx context.Context) (map[string]int, error)
}

// Count returns how many instances host owns (the heartbeat's count),
// from the records alone: it decodes no spec, so that on a host of a
// thousand instances a beat costs no spec decoding, and a record that no
// longer decodes does not stop the heartbeat. A HostCounter counts
// without decoding the records at all.
func Count(ctx context.Context, st Instances, host string) (int, error) {
	if hc, ok := st.(HostCounter); ok {
		counts, err := hc.InstanceHosts(ctx)
		if err != nil {
			return 0, fmt.Errorf("count instances: %w", err)
		}
		n := 0
		for owner, k := range counts {
			if Owns(host, owner) {
				n += k
			}
		}
		return n, nil
	}
	recs, err := st.Instances(ctx)
	if err != nil {
		return 0, fmt.Errorf("count instances: %w", err)
	}
	n := 0
	for _, rec := range recs {
		if Owns(host, rec.Host) {
			n++
		}
	}
	return n, nil
}
