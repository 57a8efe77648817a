package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// ShareMappings is how many share mappings of one host are in one status
// (shares.CountMappings).
type ShareMappings struct {
	Host, Status string
	Count        int
}

// KeyRotations is how many subjects of one key class have a rotation
// pending or failed (keyrotation.Engine.Outstanding).
type KeyRotations struct {
	Class           string
	Pending, Failed int
}

// ShareStatuses are the share mapping statuses (Nova's), exported at zero
// for this host when it has no mapping in them, so that a rule on the
// error count has a series to read.
var ShareStatuses = [...]string{types.ShareAttaching, types.ShareInactive, types.ShareActive, types.ShareDetaching, types.ShareError}

var (
	awaitingCleaningDesc = prometheus.NewDesc("vmeta_hostctl_devices_awaiting_cleaning",
		"Burned one-time-use devices of this host released by their instance and not cleaned yet (hostctl device list --needs-cleaning).",
		nil, nil)
	awaitingCleaningAgeDesc = prometheus.NewDesc("vmeta_hostctl_devices_awaiting_cleaning_oldest_seconds",
		"Time the longest-waiting device of this host has been awaiting cleaning, since its release (0: none waits).",
		nil, nil)
	shareMappingsDesc = prometheus.NewDesc("vmeta_host_share_mappings",
		"Share mappings in the store by owning host and status (attaching, inactive, active, detaching, error).",
		[]string{"host", "status"}, nil)
	keyRotationsDesc = prometheus.NewDesc("vmeta_hostctl_key_rotations",
		"Subjects of this host's key classes (one per class, one per instance for disk passphrases) whose rotation is pending (begun or waiting, e.g. for an instance to stop) or whose last attempt failed, by class and state.",
		[]string{"class", "state"}, nil)
)

// stateCollector reads, at scrape time, the state the controller's parts
// keep in the store: devices awaiting cleaning, share mappings, key
// rotations. A source that fails costs its own metrics only.
type stateCollector struct {
	host             string
	awaitingCleaning func(ctx context.Context) ([]time.Time, error)
	shareMappings    func(ctx context.Context) ([]ShareMappings, error)
	keyRotations     func(ctx context.Context) ([]KeyRotations, error)
	now              func() time.Time
	timeout          time.Duration
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.awaitingCleaning != nil {
		ch <- awaitingCleaningDesc
		ch <- awaitingCleaningAgeDesc
	}
	if c.shareMappings != nil {
		ch <- shareMappingsDesc
	}
	if c.keyRotations != nil {
		ch <- keyRotationsDesc
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if c.awaitingCleaning != nil {
		c.collectDevices(ctx, ch)
	}
	if c.shareMappings != nil {
		c.collectShares(ctx, ch)
	}
	if c.keyRotations != nil {
		c.collectKeys(ctx, ch)
	}
}

func (c *stateCollector) collectDevices(ctx context.Context, ch chan<- prometheus.Metric) {
	since, err := c.awaitingCleaning(ctx)
	if err != nil {
		err = fmt.Errorf("devices awaiting cleaning: %w", err)
		ch <- prometheus.NewInvalidMetric(awaitingCleaningDesc, err)
		ch <- prometheus.NewInvalidMetric(awaitingCleaningAgeDesc, err)
		return
	}
	now := c.now()
	var oldest time.Duration
	for _, t := range since {
		if !t.IsZero() {
			oldest = max(oldest, now.Sub(t))
		}
	}
	ch <- prometheus.MustNewConstMetric(awaitingCleaningDesc, prometheus.GaugeValue, float64(len(since)))
	ch <- prometheus.MustNewConstMetric(awaitingCleaningAgeDesc, prometheus.GaugeValue, oldest.Seconds())
}

func (c *stateCollector) collectShares(ctx context.Context, ch chan<- prometheus.Metric) {
	counts, err := c.shareMappings(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(shareMappingsDesc, fmt.Errorf("share mappings: %w", err))
		return
	}
	type key struct{ host, status string }
	n := map[key]int{}
	for _, s := range ShareStatuses {
		n[key{c.host, s}] = 0
	}
	for _, m := range counts {
		n[key{m.Host, m.Status}] += m.Count
	}
	for k, v := range n {
		ch <- prometheus.MustNewConstMetric(shareMappingsDesc, prometheus.GaugeValue, float64(v), k.host, k.status)
	}
}

func (c *stateCollector) collectKeys(ctx context.Context, ch chan<- prometheus.Metric) {
	rs, err := c.keyRotations(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(keyRotationsDesc, fmt.Errorf("key rotations: %w", err))
		return
	}
	for _, r := range rs {
		ch <- prometheus.MustNewConstMetric(keyRotationsDesc, prometheus.GaugeValue, float64(r.Pending), r.Class, "pending")
		ch <- prometheus.MustNewConstMetric(keyRotationsDesc, prometheus.GaugeValue, float64(r.Failed), r.Class, "failed")
	}
}
