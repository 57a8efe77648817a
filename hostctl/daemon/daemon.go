// Package daemon is `hostctl serve`: it opens the store, connects to
// libvirt, and runs the controller, the admin API (unix socket and an
// optional TCP listener with tokens) and the guest-facing metadata service
// in one process. The command line only fills in a Config; Run does the
// rest.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/metadatakeys"
	hostmetrics "github.com/vmeta/vmeta/hostctl/metrics"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/hostctl/reconcile"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/hostctl/view"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/version"
	"github.com/vmeta/vmeta/server"
)

// Defaults of the daemon's configuration.
const (
	DefaultDataDir = "/var/lib/vmeta"
	// DefaultMetadataListen is Nova's metadata port on loopback; a real
	// host puts the service behind 169.254.169.254 (see the README).
	DefaultMetadataListen = "127.0.0.1:8775"
)

// TokenKeyFile is the session-token key file's name in the data
// directory, its place unless the configuration names another file.
const TokenKeyFile = "metadata-token.key"

// adminReadHeaderTimeout bounds how long an admin client may take to send
// its request headers.
const adminReadHeaderTimeout = 10 * time.Second

// adminMaxHeaderBytes bounds an admin request's line and headers: a path
// or header larger than any the API names is refused (431) before a
// handler, a log line or an error body sees it (net/http's default is
// 1 MiB).
const adminMaxHeaderBytes = 64 << 10

// shutdownTimeout bounds how long the servers may take to finish their
// requests at shutdown.
const shutdownTimeout = 5 * time.Second

// Config is the daemon's configuration: one field per `hostctl serve`
// flag (AddFlags), and where the daemon writes.
type Config struct {
	// Host names this host among the hosts sharing the store (default:
	// the machine's host name; kept in the data directory).
	Host string
	// HeartbeatInterval is how often the host's heartbeat is written;
	// HostDownAfter the silence after which another host counts as down.
	HeartbeatInterval time.Duration
	HostDownAfter     time.Duration
	DataDir           string
	Socket            string
	MetadataListen    string
	Store             string
	DHCPDomain        string
	ConfigDriveFormat string
	LogLevel          string
	// StorePasswordFile holds the store's password (never in the URL:
	// a command line is visible to every user); InitEmptyStore starts on
	// an empty store even though the data directory shows one was used
	// (storecheck.go); SocketGroup may use the admin socket besides root
	// (socket.go).
	StorePasswordFile string
	InitEmptyStore    bool
	SocketGroup       string
	// Apply lists instance spec files applied at start-up.
	Apply    []string
	Metadata server.Config

	// The optional TCP admin listener (bearer tokens, roles).
	AdminListen     string
	AdminTokensFile string
	AdminTLSCert    string
	AdminTLSKey     string

	// MigrationListen is the TCP address of the host-to-host channel
	// moves arrive on (migrate.go; "": this host receives no move).
	MigrationListen string
	// MigrationLibvirtURI and MigrationTLS: live migration
	// (migrate_live.go).
	MigrationLibvirtURI string
	MigrationTLS        bool

	Virt VirtConfig
	// Shares configures the share service (shares.go).
	Shares ShareConfig
	// Devices is the passthrough device inventory (--device-spec, …).
	Devices DevicesConfig
	// KeyRotation is the key rotation policies (--key-rotation, …).
	KeyRotation KeyRotationConfig

	// EphemeralEncryptionFormats are the encryption formats this host
	// creates disks in (comma-separated); EphemeralEncryptionDefaultFormat
	// the one used when neither flavor nor image names one.
	EphemeralEncryptionFormats       string
	EphemeralEncryptionDefaultFormat string

	// LUKSIterTime is the PBKDF iteration time of new LUKS keyslots
	// (0: QEMU's default).
	LUKSIterTime time.Duration

	// Stdout receives what --apply reports; Stderr the log. Not flags;
	// os.Stdout and os.Stderr when nil.
	Stdout, Stderr io.Writer
}

// AddFlags registers the configuration's flags on fs, with their defaults.
// The token key file defaults to DATA-DIR/metadata-token.key: a caller
// that lets the data directory change and the key file not should set
// Metadata.TokenKeyFile to TokenKeyFilePath(DataDir) after parsing.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Host, "host", "", "this host's name among the hosts sharing the store (default: the machine's host name, lower-cased); stored in the data directory on the first start")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", hosts.DefaultInterval, "how often this host writes its heartbeat to the store")
	fs.DurationVar(&c.HostDownAfter, "host-down-after", hosts.DefaultDownAfter, "silence after which another host counts as down (hostctl host list; adopt and delete --force-from-store need it); keep it several heartbeat intervals, plus clock skew")
	fs.StringVar(&c.DataDir, "data-dir", DefaultDataDir, "data directory (embedded store, config drives)")
	fs.StringVar(&c.Socket, "socket", client.DefaultSocket(), "admin API unix socket")
	fs.StringVar(&c.MetadataListen, "metadata-listen", DefaultMetadataListen, "address of the guest-facing metadata service")
	fs.StringVar(&c.Store, "store", "bolt", "store: bolt (embedded, in the data directory), bolt:///path/file.db, redis://host:port/db, redis+cluster://h1:p1,h2:p2 or redis+sentinel://master@h1:p1/db")
	c.addHardeningFlags(fs)
	fs.StringVar(&c.DHCPDomain, "dhcp-domain", "novalocal", "domain appended to short hostnames in metadata (Nova's dhcp_domain)")
	fs.StringVar(&c.ConfigDriveFormat, "config-drive-format", "iso9660", "format of the config drives kept in the data directory: iso9660 or vfat")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.AdminListen, "admin-listen", "", "TCP address of the admin API for remote clients (needs --admin-tokens-file)")
	fs.StringVar(&c.AdminTokensFile, "admin-tokens-file", "", "JSON list of admin API tokens (name, role admin|member, project, sha256); see 'hostctl token new'")
	fs.StringVar(&c.AdminTLSCert, "admin-tls-cert", "", "TLS certificate for --admin-listen (with --admin-tls-key; without them the listener is plain HTTP: bind it to a management network)")
	fs.StringVar(&c.AdminTLSKey, "admin-tls-key", "", "TLS key for --admin-listen")
	fs.StringVar(&c.MigrationListen, "migration-listen", "", "TCP address of the host-to-host channel instances moving to this host arrive on (mutual TLS, certificates pinned through the store); empty: this host receives no move")
	liveMigrationFlags(fs, c) // migrate_live.go
	fs.Func("apply", "apply an instance spec at start-up (repeatable)", func(s string) error {
		c.Apply = append(c.Apply, s)
		return nil
	})
	fs.DurationVar(&c.LUKSIterTime, "luks-iter-time", 0, "PBKDF iteration time of the keyslot of each new encrypted (LUKS) disk; 0 keeps QEMU's default (2s: about that much CPU time to create a disk and to open it at every start)")
	fs.StringVar(&c.EphemeralEncryptionFormats, "ephemeral-encryption-formats", policy.FormatLUKS, "encryption formats this host creates ephemeral disks in, comma-separated; only what hostctl can create is accepted (luks: LUKS1 in qcow2); a flavor or image asking for another is refused")
	fs.StringVar(&c.EphemeralEncryptionDefaultFormat, "ephemeral-encryption-default-format", policy.FormatLUKS, "encryption format of ephemeral disks when neither the flavor, nor the image, nor an encrypted source image names one (Nova's [ephemeral_storage_encryption]/default_format)")
	c.Metadata.AddFlags(fs, "metadata-", TokenKeyFilePath(DefaultDataDir))
	// The key is in the data directory wherever --data-dir puts it
	// (hostctl serve sets it after parsing): the help says so instead of
	// naming the default directory's file.
	if f := fs.Lookup("metadata-token-key-file"); f != nil {
		f.DefValue = ""
		f.Usage += " (default DATA-DIR/" + TokenKeyFile + ")"
	}
	c.Virt.AddFlags(fs)
	c.Shares.AddFlags(fs)
	c.Devices.AddFlags(fs)
	c.KeyRotation.AddFlags(fs)
}

// encryptionHost checks the ephemeral encryption flags.
func (c *Config) encryptionHost() (policy.Host, error) {
	var h policy.Host
	for _, f := range strings.Split(c.EphemeralEncryptionFormats, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if err := creatableFormat(f); err != nil {
			return h, err
		}
		h.Formats = append(h.Formats, f)
	}
	if len(h.Formats) == 0 {
		return h, configErrorf("--ephemeral-encryption-formats: must name at least one format")
	}
	h.DefaultFormat = c.EphemeralEncryptionDefaultFormat
	if !slices.Contains(h.Formats, h.DefaultFormat) {
		return h, configErrorf("--ephemeral-encryption-default-format %q: must be one of --ephemeral-encryption-formats (%s)", h.DefaultFormat, strings.Join(h.Formats, ", "))
	}
	return h, nil
}

// TokenKeyFilePath is the session-token key file in a data directory.
func TokenKeyFilePath(dataDir string) string {
	return filepath.Join(dataDir, TokenKeyFile)
}

// ErrConfig marks an invalid configuration value (errors.Is); the
// message names the flag.
var ErrConfig = errors.New("invalid configuration")

// configError is an ErrConfig that keeps the error it wraps (its
// message names the flag).
type configError struct{ err error }

func (e *configError) Error() string        { return e.err.Error() }
func (e *configError) Unwrap() error        { return e.err }
func (e *configError) Is(target error) bool { return target == ErrConfig }

func configErrorf(format string, args ...any) error {
	return &configError{err: fmt.Errorf(format, args...)}
}

// OpenStore opens the store a --store value names: "" or "bolt" for the
// embedded store in dataDir; otherwise what the metadata replica accepts
// (bolt:///path, redis://, rediss://, redis+cluster://, redis+sentinel://).
func OpenStore(ctx context.Context, url, dataDir string) (store.Store, error) {
	return storeurl.Open(ctx, url, storeurl.WithDataDir(dataDir))
}

// Run runs the daemon until ctx is done or a server fails. It validates
// the whole configuration first (Validate): a bad one changes nothing.
// Then it starts the components (serve.components) in order and, at
// shutdown or when one fails to start, stops them in reverse.
func Run(ctx context.Context, cfg Config) error {
	chk, err := cfg.check() // validate.go: nothing is touched before this
	if err != nil {
		return err
	}
	s := newServe(cfg, chk)
	stopAll, err := startComponents(ctx, s.log, s.components())
	if err != nil {
		chk.release()
		return err
	}
	defer stopAll()
	select {
	case <-ctx.Done():
		s.log.Info("shutting down")
		return nil
	case err := <-s.errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve: %w", err)
	}
}

// serve is one run of the daemon: its configuration, what the
// validation read, and what each component brings up for the ones after
// it.
type serve struct {
	cfg            Config
	chk            *checked
	log            *slog.Logger
	stdout, stderr io.Writer
	errc           chan error // a server's end

	dirLock  *dataDirLock
	prior    priorUse
	st       store.Store
	hostName string
	holder   *hosts.Holder

	mdOpts server.Options
	md     *server.Server
	hv     *hypervisor
	audit  *events.Log
	inv    *devices.Inventory

	hm        *hostmetrics.Metrics
	states    view.States // the instances' states, for the metrics (views.go)
	ctlStore  store.Store
	km        *keys.Manager
	prober    *encryption.Prober
	keyEngine *keyrotation.Engine
	keyKick   kicker
	ctl       *controller.Controller
	reconcile *reconcile.Reconciler
	disks     *disks.Part // the disks part (parts.go: diskPart)
	keySvc    keyService
	shareSvc  *shares.Service
	mig       *migration // moves between hosts (migrate.go)

	// evac runs the evacuations from down hosts (evacuate.go).
	evac *evacuation

	beater *hosts.Beater
	srvs   []*http.Server
	mdAddr string // the metadata listener's address, for --apply's report

	// What stops the background loops.
	stopSync, stopKeys, stopBeat, stopRun func()
}

func newServe(cfg Config, chk *checked) *serve {
	s := &serve{cfg: cfg, chk: chk, stdout: cfg.Stdout, stderr: cfg.Stderr, errc: make(chan error, 4)}
	if s.stdout == nil {
		s.stdout = os.Stdout
	}
	if s.stderr == nil {
		s.stderr = os.Stderr
	}
	s.log = slog.New(slog.NewTextHandler(s.stderr, &slog.HandlerOptions{Level: chk.level}))
	return s
}

// components is the daemon's start-up order; shutdown is its reverse.
func (s *serve) components() []component {
	return []component{
		// One daemon per data directory, whatever the store (lock.go);
		// then the directory's mode, leftovers and signs of a store
		// (storecheck.go).
		{name: "data directory", start: s.startDataDir, stop: s.stopDataDir},
		{name: "store", start: s.startStore, stop: func(context.Context) error { return s.st.Close() }},
		// The host name (kept in the data directory once the store
		// opened), the store's emptiness check and the host's lease.
		{name: "host", start: s.startHost},
		{name: "metadata service", start: s.startMetadata},
		{name: "hypervisor", start: s.startHypervisor, stop: func(context.Context) error { s.hv.close(); return nil }},
		{name: "devices", start: s.startDevices, stop: s.stopDevices},
		{name: "keys", start: s.startKeys},
		{name: "controller", start: s.startController},
		// Interrupted rotations are recovered before the reconciler
		// starts an instance or a server answers a request.
		{name: "key rotation", start: s.startKeyRotation, stop: s.stopKeyRotation},
		// What this host holds of its instances evacuated while it was
		// down goes before the reconciler looks at its domains
		// (evacuate.go).
		{name: "evacuations", start: s.startEvacuations, stop: s.stopEvacuations},
		{name: "reconciler", start: s.startReconciler, stop: s.stopReconciler}, // reconcile.go
		{name: "shares", start: s.startShares, stop: func(context.Context) error { s.shareSvc.Close(); return nil }},
		{name: "metrics", start: s.startMetrics},
		{name: "heartbeat", start: s.startHeartbeat, stop: s.stopHeartbeat},
		{name: "host channel", start: s.startMigration, stop: s.stopMigration}, // migrate.go
		// The metadata cache follows the store's change feed before the
		// servers answer (this process's own publishes reach it at once
		// through Invalidate).
		{name: "metadata feed", start: s.startFeed, stop: s.stopFeed},
		{name: "servers", start: s.startServers, stop: s.stopServers},
		{name: "apply", start: s.applySpecs},
	}
}

func (s *serve) startDataDir(context.Context) error {
	if err := os.MkdirAll(s.cfg.DataDir, dataDirMode); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	var err error
	if s.dirLock, err = lockDataDir(s.cfg.DataDir); err != nil {
		return err
	}
	if s.prior, err = prepareDataDir(s.cfg.DataDir, s.log); err != nil {
		s.dirLock.Close()
		return err
	}
	return nil
}

func (s *serve) stopDataDir(context.Context) error { return s.dirLock.Close() }

func (s *serve) startStore(ctx context.Context) error {
	var err error
	s.st, err = s.cfg.openStore(ctx, s.chk.storePassword, s.log)
	return err
}

func (s *serve) startHost(ctx context.Context) error {
	var err error
	if s.hostName, err = hosts.Resolve(s.cfg.DataDir, s.cfg.Host); err != nil {
		return configErrorf("--host: %w", err)
	}
	if err := checkStoreNotLost(ctx, s.st, s.hostName, s.prior, s.cfg); err != nil {
		return err
	}
	s.holder, err = holdHost(ctx, s.st, s.hostName, s.cfg)
	return err
}

// startMetadata reads the metadata key files (creating the token key
// file when absent) and builds the metadata service.
func (s *serve) startMetadata(context.Context) error {
	var err error
	if s.mdOpts, err = s.cfg.Metadata.Options(s.log); err != nil {
		return fmt.Errorf("metadata service: %w", err)
	}
	// One registry for the metadata service's metrics and hostctl's own:
	// the operator listener serves both.
	s.mdOpts.Registry = server.NewRegistry()
	s.md = server.New(s.st, s.mdOpts)
	return nil
}

func (s *serve) startHypervisor(ctx context.Context) error {
	s.hv = s.chk.hv
	return s.hv.connect(ctx, s.log)
}

// startDevices opens the audit streams and the device inventory, and
// re-reads the device spec every --device-sync-interval.
func (s *serve) startDevices(ctx context.Context) error {
	// The audit streams: Redis streams on Redis (every host's events in
	// one place), JSON-lines files in the data directory otherwise.
	s.audit = events.New(events.For(s.st, filepath.Join(s.cfg.DataDir, "events")), s.hostName, s.log)
	var err error
	if s.inv, err = openDevices(ctx, s.cfg.Devices, s.chk.devSpec, s.chk.hook, s.st, s.hostName, s.audit, s.log); err != nil {
		return err
	}
	syncCtx, stopSync := context.WithCancel(ctx)
	syncDone := make(chan struct{})
	go func() { defer close(syncDone); syncDevices(syncCtx, s.cfg.Devices, s.inv, s.log) }()
	s.stopSync = func() { stopSync(); <-syncDone }
	return nil
}

// stopDevices stops the spec's re-reading, then kills the cleanup hooks
// still running and records their outcome (before the store closes).
func (s *serve) stopDevices(ctx context.Context) error {
	s.stopSync()
	if s.chk.hook != nil {
		s.chk.hook.Stop(ctx)
	}
	return nil
}

// startKeys opens the key manager and the key rotation engine, and
// stores the policies of --key-rotation.
func (s *serve) startKeys(ctx context.Context) error {
	s.hm = hostmetrics.New()
	s.ctlStore = s.hm.Store(s.st) // the controller's and the heartbeat's store errors are counted
	// A missing or wrong key-encryption key stops the daemon here: a new
	// key would make every stored secret unreadable.
	var err error
	if s.km, err = keys.Open(ctx, s.ctlStore, s.cfg.DataDir, keys.Options{Host: s.hostName}); err != nil {
		return fmt.Errorf("key manager: %w", err)
	}
	s.prober = encryption.NewProber(encryption.ProbeOptions{})
	// Key rotation: policies from the flags, procedures registered once
	// the parts they need exist.
	s.keyEngine = newKeyEngine(s.ctlStore, s.hostName, s.log)
	return applyPolicies(ctx, s.keyEngine, s.chk.policies)
}

// startController builds the controller.
func (s *serve) startController(context.Context) error {
	s.keyKick = make(kicker, 1)
	cfg, hv := s.cfg, s.hv
	// The share service is a part: made first, given the controller
	// once it exists (shares.go); its reconciler starts with "shares".
	core := &shareCore{}
	s.shareSvc = newShares(s.cfg, s.ctlStore, core, hv.shareSupport(), s.hostName, s.audit, s.log, s.km)
	// The faults part keeps its records in the controller's store.
	faultRecords, _ := s.ctlStore.(store.Records)
	fl := faults.New(faultRecords, s.log)
	imgs := hv.imageDir(cfg.DataDir)                                                                                                                                                                                                          // parts.go
	s.disks = s.diskPart(imgs)                                                                                                                                                                                                                // parts.go
	parts, bindParts := Parts(PartsConfig{Inventory: s.inv, Hypervisor: hv.network(), DefaultNetwork: hv.dom.DefaultNetwork, Disks: s.disks, KeyRecords: s.keyEngine, Shares: s.shareSvc, Faults: fl, Records: s.ctlStore, Host: s.hostName}) // parts.go
	parts = append(parts, hv.mediaPart(cfg.DataDir, s.log)...)                                                                                                                                                                                // media.go
	parts = append(parts, hv.firmwarePart(cfg.DataDir, s.log)...)                                                                                                                                                                             // virt.go
	useMACStore(parts, s.ctlStore, s.log)                                                                                                                                                                                                     // macs.go
	trustProxies(parts, s.mdOpts.TrustedProxies)                                                                                                                                                                                              // macs.go: no instance at a trusted proxy's address
	useLeaseEvents(parts, s.audit)                                                                                                                                                                                                            // macs.go: a fixed address leased to another MAC
	s.states = hv.instanceStates(s.hostName, parts, s.log)                                                                                                                                                                                    // views.go
	s.ctl = controller.New(s.ctlStore, hv.options(controller.Options{
		Host:        s.hostName,
		Hosts:       s.hostRegistry(),
		DataDir:     cfg.DataDir,
		Render:      metadata.Options{DHCPDomain: cfg.DHCPDomain},
		Notify:      s.md,
		Logger:      s.log,
		DriveFormat: s.chk.format,
		Observe:     s.hm.Observe,
		Encryption:  s.chk.encHost,
		Audit:       s.audit,
		Images:      imgs,
		Parts:       parts,
	}))
	core.Controller, core.LiveDevices = s.ctl, ops.NewLiveDevices(s.ctl) // shares.go
	bindParts(s.ctl, s.log)
	return nil
}

// startKeyRotation registers the rotation procedures, recovers
// interrupted rotations, then runs the engine (and the token keys'
// expiry) in the background.
func (s *serve) startKeyRotation(ctx context.Context) error {
	e := s.keyEngine
	e.Register(keyrotation.KEK, keyrotation.NewKEKRotator(s.km))
	if s.km.KEK().Created {
		if err := e.MarkCreated(ctx, keyrotation.Subject{Class: keyrotation.KEK}); err != nil {
			return fmt.Errorf("key rotation status: %w", err)
		}
	}
	// The token signing key and the proxy secret: rotated in two phases
	// (accepted everywhere, then current), the metadata readers following
	// on the store's feed.
	tokenKeys, proxyKeys := metadatakeys.Register(e, s.mdOpts, s.st, s.log)
	if err := markKeyFilesCreated(ctx, e, s.mdOpts); err != nil { // keyrotation.go
		return err
	}
	registerDiskRotation(e, s.ctl, s.ctlStore, s.disks, s.km, luksTool(s.cfg), s.log) // keyrotation.go
	if cx := s.shareSvc.CephX(); cx != nil {
		e.Register(keyrotation.CephX, keyrotation.CephXRotator{Client: cx})
	}
	if err := e.Recover(ctx); err != nil {
		return fmt.Errorf("key rotation: %w", err)
	}
	keyCtx, stopKeys := context.WithCancel(ctx)
	keysDone := make(chan struct{})
	go func() {
		defer close(keysDone)
		var expiring sync.WaitGroup
		if tokenKeys != nil {
			// Token keys older than the longest token lifetime go.
			expiring.Go(func() { tokenKeys.ExpireLoop(keyCtx, 0) })
		}
		runKeyRotation(keyCtx, e, s.keyKick, s.cfg.KeyRotation.Interval, s.log)
		expiring.Wait()
	}()
	s.stopKeys = func() { stopKeys(); <-keysDone }
	s.keySvc = keyService{Engine: e, instances: s.ctlStore, proxy: proxyKeys}
	return nil
}

func (s *serve) stopKeyRotation(context.Context) error { s.stopKeys(); return nil }

func (s *serve) startShares(context.Context) error {
	s.shareSvc.Start()
	return nil
}

func (s *serve) startMetrics(context.Context) error {
	records, _ := s.ctlStore.(store.Records)
	return s.hm.Register(s.mdOpts.Registry, s.hv.metricSources(partMetricSources(hostmetrics.Sources{
		Instances: s.ctl,
		Store:     s.ctlStore, // a scrape reads only the instance records that changed
		States:    s.states,
		Hosts:     s.hostRegistry().List,
	}, s.hostName, s.inv, records, s.keyEngine))) // metrics.go
}

// hostRegistry is the hosts sharing the store, as their heartbeats tell
// (the controller's adopt check, hostctl host list, the metrics).
func (s *serve) hostRegistry() hosts.Registry {
	return hosts.Registry{Store: s.ctlStore, DownAfter: s.cfg.HostDownAfter}
}

// startHeartbeat writes the first heartbeat, then one every
// --heartbeat-interval, and one more with the host's traits once the
// encryption probe is done.
func (s *serve) startHeartbeat(ctx context.Context) error {
	cfg, prober := s.cfg, s.prober
	libvirt, formats := s.hv.conn != nil, s.chk.encHost.Formats
	s.beater = &hosts.Beater{Store: s.ctlStore, Host: s.hostName, Version: version.String(), Interval: cfg.HeartbeatInterval, Log: s.log,
		Holder: s.holder, DownAfter: cfg.HostDownAfter,
		Traits: func() []string {
			if sup, ok := prober.Ready(); ok {
				return hostTraits(libvirt, sup, formats)
			}
			return nil
		},
		Count: func(ctx context.Context) (int, error) { return hosts.Count(ctx, s.ctlStore, s.hostName) }}
	if err := s.beater.Beat(ctx); err != nil {
		return fmt.Errorf("first heartbeat: %w", err)
	}
	beatCtx, stopBeat := context.WithCancel(ctx)
	beatDone := make(chan struct{})
	go func() { defer close(beatDone); s.beater.Run(beatCtx) }()
	// The traits are known once the encryption probe is done: publish
	// them then rather than at the next beat.
	probeBeat := make(chan struct{})
	go func() {
		defer close(probeBeat)
		if sup, err := prober.Support(beatCtx); err == nil {
			if err := s.beater.Beat(beatCtx); err != nil && beatCtx.Err() == nil {
				s.log.Warn("heartbeat with the host's traits not written", "err", err)
			} else if err == nil {
				s.log.Info("host traits published", "traits", strings.Join(hostTraits(libvirt, sup, formats), ","))
			}
		}
	}()
	s.stopBeat = func() { stopBeat(); <-beatDone; <-probeBeat }
	return nil
}

// stopHeartbeat stops the beats and writes the last one (stopped).
func (s *serve) stopHeartbeat(ctx context.Context) error {
	s.stopBeat()
	if err := s.beater.Stop(ctx); err != nil {
		return fmt.Errorf("last heartbeat (stopped) not written: %w", err)
	}
	return nil
}

// startFeed follows the store's change feed (other hosts and processes
// publish too), sweeps the cache, and re-reads the metadata key files on
// SIGHUP.
func (s *serve) startFeed(ctx context.Context) error {
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = s.md.Run(runCtx)
	}()
	go s.md.ReloadOnHangup(runCtx)
	s.stopRun = func() { stopRun(); <-runDone }
	return nil
}

func (s *serve) stopFeed(context.Context) error { s.stopRun(); return nil }

// startServers listens on the admin socket, the metadata address, the
// operator listener and the TCP admin address (each optional one when
// configured), then serves them all; a listener that cannot be had
// closes the others.
func (s *serve) startServers(context.Context) error {
	cfg := s.cfg
	adminLn, err := listenAdmin(cfg.Socket, cfg.SocketGroup, s.chk.socketGID, s.log)
	if err != nil {
		return err
	}
	lns := []net.Listener{adminLn}
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	mdLn, err := net.Listen("tcp", cfg.MetadataListen)
	if err != nil {
		closeAll()
		return fmt.Errorf("metadata listener: %w", err)
	}
	lns = append(lns, mdLn)
	var metricsLn, tcpLn net.Listener
	if cfg.Metadata.MetricsListen != "" {
		if metricsLn, err = net.Listen("tcp", cfg.Metadata.MetricsListen); err != nil {
			closeAll()
			return fmt.Errorf("metadata metrics listener: %w", err)
		}
		lns = append(lns, metricsLn)
	}
	if s.chk.tokenAuth != nil {
		if tcpLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			closeAll()
			return fmt.Errorf("admin listener: %w", err)
		}
	}

	adminSrv := &http.Server{Handler: s.adminHandler(auth.LocalAuth{}), ReadHeaderTimeout: adminReadHeaderTimeout, MaxHeaderBytes: adminMaxHeaderBytes}
	// The guest-facing server carries the metadata service's timeouts,
	// header limit and per-address connection limit.
	mdSrv := s.md.HTTPServer()
	s.srvs = []*http.Server{adminSrv, mdSrv}
	s.serveOn(adminSrv, adminLn)
	s.serveOn(mdSrv, s.md.Listener(mdLn))
	s.mdAddr = mdLn.Addr().String()
	logArgs := []any{"admin_socket", cfg.Socket, "metadata", s.mdAddr, "store", storeName(cfg.Store, cfg.DataDir)}
	if metricsLn != nil {
		metricsSrv := &http.Server{Handler: s.md.MetricsHandler(), ReadHeaderTimeout: server.ReadHeaderTimeout}
		s.srvs = append(s.srvs, metricsSrv)
		s.serveOn(metricsSrv, metricsLn)
		logArgs = append(logArgs, "metadata_metrics", metricsLn.Addr().String())
	}
	if tcpLn != nil {
		tcpSrv := &http.Server{Handler: s.adminHandler(s.chk.tokenAuth), ReadHeaderTimeout: adminReadHeaderTimeout, MaxHeaderBytes: adminMaxHeaderBytes}
		s.srvs = append(s.srvs, tcpSrv)
		if s.chk.tlsCert != nil {
			// The pair the validation loaded (ServeTLS takes it from
			// TLSConfig when given no files).
			tcpSrv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*s.chk.tlsCert}}
			go func() { s.errc <- tcpSrv.ServeTLS(tcpLn, "", "") }()
		} else {
			s.serveOn(tcpSrv, tcpLn)
		}
		logArgs = append(logArgs, "admin_tcp", tcpLn.Addr().String(), "admin_tls", s.chk.tlsCert != nil)
	}
	s.log.Info("hostctl serving", logArgs...)
	return nil
}

func (s *serve) adminHandler(a auth.Authenticator) http.Handler {
	svc := adminServices(s.ctl, s.catalog(), s.inv, s.shareSvc, s.keySvc, s.hostRegistry(), s.audit)
	svc.Migrations = s.migrations() // migrate.go
	svc.Evacuations = s.evacuations()
	return api.NewHandler(svc, s.log, a)
}

// serveOn serves srv on ln in the background; its end is reported on
// s.errc.
func (s *serve) serveOn(srv *http.Server, ln net.Listener) {
	go func() { s.errc <- srv.Serve(ln) }()
}

func (s *serve) stopServers(ctx context.Context) error {
	for _, srv := range s.srvs {
		_ = srv.Shutdown(ctx)
	}
	return nil
}

// applySpecs applies the specs of --apply, read and parsed by the
// validation.
func (s *serve) applySpecs(ctx context.Context) error {
	for _, a := range s.chk.apply {
		if err := applyAtStart(ctx, s.ctl, a, s.mdAddr, s.cfg.Socket, s.stdout); err != nil {
			return err
		}
	}
	return nil
}

// storeName names the store for logs, never with credentials.
func storeName(url, dataDir string) string {
	if storeurl.IsEmbedded(url) {
		return storeurl.EmbeddedPath(dataDir)
	}
	return storeurl.Redact(url)
}

// staleSocketProbe bounds the dial that tells a running daemon's socket
// from a stale one.
const staleSocketProbe = time.Second

func applyAtStart(ctx context.Context, ctl *controller.Controller, a applyFile, mdAddr, socket string, stdout io.Writer) error {
	file := a.file
	inst, err := ctl.Apply(ctx, a.spec)
	if err != nil {
		return fmt.Errorf("--apply %s: %w", file, err)
	}
	s := inst.Spec
	fmt.Fprintf(stdout, "instance %s applied (uuid %s) from %s\n", s.Name, s.UUID, file)
	fmt.Fprintf(stdout, "  config drive: %s\n", inst.ConfigDrive)
	for _, w := range inst.Warnings {
		fmt.Fprintf(stdout, "  warning: %s\n", w)
	}
	host, port, _ := net.SplitHostPort(mdAddr)
	// A guest is whoever connects from one of its addresses; on this
	// host that works for loopback addresses the listener can be reached on.
	for _, a := range s.Addresses {
		var url string
		switch {
		case host == a:
			url = "http://" + mdAddr
		case net.ParseIP(host).IsUnspecified() && net.ParseIP(a).IsLoopback():
			url = "http://" + net.JoinHostPort(a, port)
		default:
			continue
		}
		fmt.Fprintf(stdout, "  its metadata, fetched from its address %s:\n", a)
		fmt.Fprintf(stdout, "    curl -s %s/openstack/latest/meta_data.json\n", url)
		fmt.Fprintf(stdout, "    curl -s %s/latest/meta-data/hostname\n", url)
	}
	fmt.Fprintf(stdout, "  manage it: VMETA_SOCKET=%s hostctl instance show %s\n", socket, s.Name)
	return nil
}
