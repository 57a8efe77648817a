// Package metrics is hostctl's own Prometheus metrics, served by `hostctl
// serve` on the metadata service's operator listener next to the
// service's metrics (one scrape gets both, with the Go and process
// collectors):
//
//   - vmeta_host_instances{host,state}: instance records of every host in
//     the store, kept up to date from the store's change feed (a scrape
//     reads only the records that changed, and each instance's live
//     state: instances.go);
//   - vmeta_host_heartbeat_age_seconds{host} and vmeta_host_up{host}: every
//     host's heartbeat, read at scrape time;
//   - vmeta_hostctl_operation_duration_seconds{op} and
//     vmeta_hostctl_operation_failures_total{op}: this host's instance
//     operations (controller.Options.Observe);
//   - vmeta_hostctl_libvirt_connected: this host's libvirt connection;
//   - vmeta_hostctl_store_errors_total: this host's failed store
//     operations (through the Store wrapper);
//   - vmeta_hostctl_devices_awaiting_cleaning and
//     vmeta_hostctl_devices_awaiting_cleaning_oldest_seconds: this host's
//     burned devices not cleaned yet, and how long the oldest has waited;
//   - vmeta_host_share_mappings{host,status}: every host's share mappings;
//   - vmeta_hostctl_key_rotations{class,state}: this host's key rotations
//     pending and failed (state.go).
//
// ../dist/grafana holds a dashboard of these and the metadata service's
// series, ../dist/prometheus alert rules on them (with promtool unit
// tests); dist_test.go checks that every series they query is served.
//
// It reads the store and the controller only through the narrow
// interfaces below; it imports neither the daemon, the controller nor
// libvirt.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/store"
)

// DefaultScrapeTimeout bounds the store reads of one scrape.
const DefaultScrapeTimeout = 5 * time.Second

// Operations are the controller's operations, resolved up front so
// that their series exist (at zero) before the first one runs.
var Operations = [...]string{"apply", "start", "stop", "delete", "attach_disk", "detach_disk", "attach_nic", "detach_nic", "adopt", "force_delete"}

// StateUnobserved is the state label of instances whose domain state this
// host cannot see: another host's, and every instance without a
// hypervisor.
const StateUnobserved = "unobserved"

// operationBuckets are the upper bounds of the operation histogram, in
// seconds: from a store-only apply (milliseconds) to a disk image
// conversion or a guest that is slow to release a device (minutes).
var operationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// InstanceLister lists every host's instances, with the domain state of
// this host's (controller.Controller.ListAll).
type InstanceLister interface {
	ListAll(ctx context.Context) ([]*controller.Instance, error)
}

// Sources are where the metrics read at scrape time come from; a nil
// source leaves its metrics out.
type Sources struct {
	// Instances feeds vmeta_host_instances.
	Instances InstanceLister
	// Store and States, when both set, make vmeta_host_instances keep
	// every instance's record (name, UUID, host) and follow the store's
	// change feed: a scrape then reads only the records that changed, and
	// for each instance only its live state (States), never its spec.
	// Without them every scrape lists every instance through
	// Instances.ListAll, which decodes and validates each one.
	Store  InstanceStore
	States InstanceStater
	// Hosts feeds vmeta_host_heartbeat_age_seconds and vmeta_host_up
	// (hosts.List over the store, as the daemon judges heartbeats).
	Hosts func(ctx context.Context) ([]hosts.Status, error)
	// LibvirtConnected feeds vmeta_hostctl_libvirt_connected (nil without
	// a hypervisor: the gauge is absent).
	LibvirtConnected func() bool
	// Host is this host's name: vmeta_host_share_mappings has its
	// statuses at zero when it has no mapping in them.
	Host string
	// AwaitingCleaning feeds vmeta_hostctl_devices_awaiting_cleaning and
	// ..._oldest_seconds: since when each of this host's burned devices
	// has awaited cleaning (its release; the zero time when unknown:
	// counted, not aged).
	AwaitingCleaning func(ctx context.Context) ([]time.Time, error)
	// ShareMappings feeds vmeta_host_share_mappings: every host's share
	// mappings by host and status.
	ShareMappings func(ctx context.Context) ([]ShareMappings, error)
	// KeyRotations feeds vmeta_hostctl_key_rotations: per key class, this
	// host's rotations pending and failed.
	KeyRotations func(ctx context.Context) ([]KeyRotations, error)
	// Now is the clock of the ages (time.Now when nil).
	Now func() time.Time
	// ScrapeTimeout bounds the reads of one scrape (DefaultScrapeTimeout
	// when 0).
	ScrapeTimeout time.Duration
}

// Metrics are hostctl's metrics. New makes the ones the controller feeds
// (operations, store errors), so that they can be wired into it; Register
// adds the scrape-time ones and puts them all on a registry.
type Metrics struct {
	durations   [len(Operations)]prometheus.Observer
	failures    [len(Operations)]prometheus.Counter
	durationVec *prometheus.HistogramVec
	failureVec  *prometheus.CounterVec
	storeErrors prometheus.Counter
}

// New creates hostctl's metrics, not registered yet.
func New() *Metrics {
	m := &Metrics{
		durationVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "vmeta_hostctl_operation_duration_seconds",
			Help:    "Time this host took for an instance operation, waiting for the instance's lock included, by operation (failed ones too).",
			Buckets: operationBuckets,
		}, []string{"op"}),
		failureVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vmeta_hostctl_operation_failures_total",
			Help: "Instance operations of this host that returned an error (refused requests included), by operation.",
		}, []string{"op"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vmeta_hostctl_store_errors_total",
			Help: "Failed store operations of this host's controller (not found and conflicts are answers, not failures).",
		}),
	}
	for i, op := range Operations {
		m.durations[i] = m.durationVec.WithLabelValues(op)
		m.failures[i] = m.failureVec.WithLabelValues(op)
	}
	return m
}

// Register puts the metrics on reg, with collectors reading o at scrape
// time. The Go and process collectors are the registry owner's
// (server.NewRegistry has them).
func (m *Metrics) Register(reg prometheus.Registerer, o Sources) error {
	cs := []prometheus.Collector{m.durationVec, m.failureVec, m.storeErrors}
	timeout := o.ScrapeTimeout
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	if o.Instances != nil || o.Hosts != nil {
		sc := &storeCollector{instances: o.Instances, hosts: o.Hosts, timeout: timeout}
		if o.States != nil && o.Store != nil {
			sc.stater, sc.cache = o.States, newInstanceCache(o.Store)
		}
		cs = append(cs, sc)
	}
	if o.AwaitingCleaning != nil || o.ShareMappings != nil || o.KeyRotations != nil {
		now := o.Now
		if now == nil {
			now = time.Now
		}
		cs = append(cs, &stateCollector{host: o.Host, awaitingCleaning: o.AwaitingCleaning, shareMappings: o.ShareMappings,
			keyRotations: o.KeyRotations, now: now, timeout: timeout})
	}
	if o.LibvirtConnected != nil {
		connected := o.LibvirtConnected
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vmeta_hostctl_libvirt_connected",
			Help: "1 while this host is connected to libvirtd, 0 while it reconnects.",
		}, func() float64 { return boolFloat(connected()) }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register hostctl metrics: %w", err)
		}
	}
	return nil
}

// Observe records an instance operation: pass it as
// controller.Options.Observe.
func (m *Metrics) Observe(op string, took time.Duration, err error) {
	d, f := m.operation(op)
	d.Observe(took.Seconds())
	if err != nil {
		f.Inc()
	}
}

func (m *Metrics) operation(op string) (prometheus.Observer, prometheus.Counter) {
	for i, known := range Operations {
		if op == known {
			return m.durations[i], m.failures[i]
		}
	}
	return m.durationVec.WithLabelValues(op), m.failureVec.WithLabelValues(op)
}

// storeFailed counts err if it is a failure of the store rather than an
// answer (not found, conflict).
func (m *Metrics) storeFailed(err error) {
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		m.storeErrors.Inc()
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var (
	instancesDesc = prometheus.NewDesc("vmeta_host_instances",
		"Instance records in the store by owning host and domain state: the state libvirt reports for this host's instances (running, shutoff, missing, unknown, ...), \""+StateUnobserved+"\" where this host cannot see it (another host's instances; no hypervisor).",
		[]string{"host", "state"}, nil)
	heartbeatAgeDesc = prometheus.NewDesc("vmeta_host_heartbeat_age_seconds",
		"Time since each host's last heartbeat in the store, by this host's clock.",
		[]string{"host"}, nil)
	hostUpDesc = prometheus.NewDesc("vmeta_host_up",
		"1 if the host's heartbeat is fresh, 0 if the host is down (silent too long, or stopped).",
		[]string{"host"}, nil)
)

// storeCollector reads the instances and the heartbeats at scrape time.
type storeCollector struct {
	instances InstanceLister
	hosts     func(ctx context.Context) ([]hosts.Status, error)
	timeout   time.Duration
	// stater and cache, when set, feed vmeta_host_instances instead of
	// instances.ListAll.
	stater InstanceStater
	cache  *instanceCache
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.instances != nil {
		ch <- instancesDesc
	}
	if c.hosts != nil {
		ch <- heartbeatAgeDesc
		ch <- hostUpDesc
	}
}

// Collect sends what it read; a read that fails is reported as an
// invalid metric, which the handler logs and skips (the rest of the
// scrape is served).
func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if c.instances != nil {
		c.collectInstances(ctx, ch)
	}
	if c.hosts != nil {
		c.collectHosts(ctx, ch)
	}
}

func (c *storeCollector) collectInstances(ctx context.Context, ch chan<- prometheus.Metric) {
	type key struct{ host, state string }
	counts := map[key]int{}
	count := func(host, state string) {
		if state == "" {
			state = StateUnobserved
		}
		counts[key{host, state}]++
	}
	if c.cache != nil {
		recs, err := c.cache.records(ctx)
		var states []string
		if err == nil {
			states, err = c.stater.InstanceStates(ctx, recs)
		}
		if err == nil && len(states) != len(recs) {
			err = fmt.Errorf("%d states for %d instances", len(states), len(recs))
		}
		if err != nil {
			ch <- prometheus.NewInvalidMetric(instancesDesc, fmt.Errorf("vmeta_host_instances: %w", err))
			return
		}
		for i, r := range recs {
			count(r.Host, states[i])
		}
	} else {
		insts, err := c.instances.ListAll(ctx)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(instancesDesc, fmt.Errorf("vmeta_host_instances: %w", err))
			return
		}
		for _, in := range insts {
			count(in.Host, in.State)
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(n), k.host, k.state)
	}
}

func (c *storeCollector) collectHosts(ctx context.Context, ch chan<- prometheus.Metric) {
	sts, err := c.hosts(ctx)
	if err != nil {
		err = fmt.Errorf("host heartbeats: %w", err)
		ch <- prometheus.NewInvalidMetric(heartbeatAgeDesc, err)
		ch <- prometheus.NewInvalidMetric(hostUpDesc, err)
		return
	}
	for _, st := range sts {
		ch <- prometheus.MustNewConstMetric(heartbeatAgeDesc, prometheus.GaugeValue, st.Age.Seconds(), st.Host)
		ch <- prometheus.MustNewConstMetric(hostUpDesc, prometheus.GaugeValue, boolFloat(!st.Down), st.Host)
	}
}
