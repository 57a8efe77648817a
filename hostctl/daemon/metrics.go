package daemon

import (
	"context"
	"time"

	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	hostmetrics "github.com/vmeta/vmeta/hostctl/metrics"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/internal/store"
)

// partMetricSources adds to s the metrics of the state the parts keep
// in the store: this host's devices awaiting cleaning, every host's share
// mappings, this host's key rotations pending and failed (each read at
// scrape time, one listing each).
func partMetricSources(src hostmetrics.Sources, host string, inv *devices.Inventory, records store.Records, e *keyrotation.Engine) hostmetrics.Sources {
	src.Host = host
	if inv != nil {
		src.AwaitingCleaning = func(ctx context.Context) ([]time.Time, error) {
			devs, err := inv.List(ctx, devices.Filter{NeedsCleaning: true})
			if err != nil {
				return nil, err
			}
			since := make([]time.Time, len(devs))
			for i, d := range devs {
				switch {
				case d.ReleasedAt != nil:
					since[i] = *d.ReleasedAt
				case d.BurnedAt != nil:
					since[i] = *d.BurnedAt
				}
			}
			return since, nil
		}
	}
	if records != nil {
		src.ShareMappings = func(ctx context.Context) ([]hostmetrics.ShareMappings, error) {
			counts, err := shares.CountMappings(ctx, records)
			if err != nil {
				return nil, err
			}
			out := make([]hostmetrics.ShareMappings, len(counts))
			for i, c := range counts {
				out[i] = hostmetrics.ShareMappings{Host: c.Host, Status: c.Status, Count: c.Count}
			}
			return out, nil
		}
	}
	if e != nil {
		src.KeyRotations = func(ctx context.Context) ([]hostmetrics.KeyRotations, error) {
			o, err := e.Outstanding(ctx)
			if err != nil {
				return nil, err
			}
			out := make([]hostmetrics.KeyRotations, 0, len(o))
			for _, c := range keyrotation.Classes {
				out = append(out, hostmetrics.KeyRotations{Class: string(c), Pending: o[c].Pending, Failed: o[c].Failed})
			}
			return out, nil
		}
	}
	return src
}
