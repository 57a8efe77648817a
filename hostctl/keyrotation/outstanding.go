package keyrotation

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Outstanding counts a class's subjects whose rotation is not finished.
type Outstanding struct {
	// Pending: a rotation begun (its target recorded) and not finished,
	// or waiting (Status.Pending: a running instance's disks), whose last
	// attempt did not fail.
	Pending int
	// Failed: the last rotation attempt failed (Status.Error); the next
	// Run tries again.
	Failed int
}

// Outstanding returns, for every class (Classes, registered or not), how
// many of this host's subjects have a rotation pending or failed, from
// their stored statuses: one listing of the host's status records, for
// the metrics a scrape reads (hostctl/metrics), however many instances
// there are. A rotation a policy asks for that no Run has begun yet is
// not counted.
func (e *Engine) Outstanding(ctx context.Context) (map[Class]Outstanding, error) {
	prefix := recordPrefix + e.opts.Host + "/status/"
	recs, err := e.st.Records(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("key rotation statuses: %w", err)
	}
	out := make(map[Class]Outstanding, len(Classes))
	for _, c := range Classes {
		out[c] = Outstanding{}
	}
	for _, r := range recs {
		name, _, _ := strings.Cut(strings.TrimPrefix(r.Key, prefix), "/")
		c := Class(name)
		o, known := out[c]
		if !known {
			continue // a class of a later version
		}
		var st Status
		if err := json.Unmarshal(r.Value, &st); err != nil {
			return nil, fmt.Errorf("key rotation status %s: %w", r.Key, err)
		}
		switch {
		case st.Error != "":
			o.Failed++
		case st.Target > st.KeyGeneration || st.Pending != "":
			o.Pending++
		}
		out[c] = o
	}
	return out, nil
}
