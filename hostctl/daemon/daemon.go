// Package daemon is `hostctl serve`: it opens the store, connects to
// libvirt, and runs the controller, the admin API (unix socket and an
// optional TCP listener with tokens) and the guest-facing metadata service
// in one process. The command line only fills in a Config; Run does the
// rest.
package daemon

import (
	"context"
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

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/metadatakeys"
	hostmetrics "github.com/vmeta/vmeta/hostctl/metrics"
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

type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrConfig }

func configErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

// OpenStore opens the store a --store value names: "" or "bolt" for the
// embedded store in dataDir; otherwise what the metadata replica accepts
// (bolt:///path, redis://, rediss://, redis+cluster://, redis+sentinel://).
func OpenStore(ctx context.Context, url, dataDir string) (store.Store, error) {
	return storeurl.Open(ctx, url, storeurl.WithDataDir(dataDir))
}

// Run runs the daemon until ctx is done or a server fails.
func Run(ctx context.Context, cfg Config) error {
	stdout, stderr := cfg.Stdout, cfg.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return configErrorf("--log-level %q: must be debug, info, warn or error", cfg.LogLevel)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	format := configdrive.Format(cfg.ConfigDriveFormat)
	if format != configdrive.ISO9660 && format != configdrive.VFAT {
		return configErrorf("--config-drive-format %q: must be iso9660 or vfat", cfg.ConfigDriveFormat)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	// One daemon per data directory, whatever the store (lock.go); then
	// the directory's mode, leftovers and signs of a store (storecheck.go).
	dirLock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer dirLock.Close()
	prior, err := prepareDataDir(cfg.DataDir, log)
	if err != nil {
		return err
	}
	if cfg.Host != "" {
		if err := hosts.CheckName(cfg.Host); err != nil {
			return configErrorf("--host: %v", err)
		}
	}
	if cfg.HeartbeatInterval <= 0 || cfg.HostDownAfter <= cfg.HeartbeatInterval {
		return configErrorf("--host-down-after (%s) must be longer than --heartbeat-interval (%s), which must be positive", cfg.HostDownAfter, cfg.HeartbeatInterval)
	}
	encHost, err := cfg.encryptionHost()
	if err != nil {
		return err
	}

	st, err := cfg.openStore(ctx, log)
	if err != nil {
		return err
	}
	defer st.Close()
	// The host name is kept in the data directory once the store opened
	// (a first start that cannot reach its store leaves no sign of use).
	hostName, err := hosts.Resolve(cfg.DataDir, cfg.Host)
	if err != nil {
		return configErrorf("--host: %v", err)
	}
	if err := checkStoreNotLost(ctx, st, hostName, prior, cfg); err != nil {
		return err
	}
	holder, err := holdHost(ctx, st, hostName, cfg)
	if err != nil {
		return err
	}

	mdOpts, err := cfg.Metadata.Options(log)
	if err != nil {
		return fmt.Errorf("metadata service: %w", err)
	}
	// One registry for the metadata service's metrics and hostctl's own:
	// the operator listener serves both.
	mdOpts.Registry = server.NewRegistry()
	md := server.New(st, mdOpts)
	hv, err := cfg.Virt.connect(ctx, log)
	if err != nil {
		return err
	}
	defer hv.close()
	// The audit streams: Redis streams on Redis (every host's events in
	// one place), JSON-lines files in the data directory otherwise.
	audit := events.New(events.For(st, filepath.Join(cfg.DataDir, "events")), hostName, log)
	inv, hook, err := openDevices(ctx, cfg.Devices, st, hostName, audit, log)
	if err != nil {
		return err
	}
	syncCtx, stopSync := context.WithCancel(ctx)
	syncDone := make(chan struct{})
	go func() { defer close(syncDone); syncDevices(syncCtx, cfg.Devices, inv, log) }()
	defer func() { stopSync(); <-syncDone }()
	if hook != nil {
		// Hooks still running are killed, and their outcome recorded
		// before the store closes.
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			hook.Stop(sctx)
		}()
	}
	hm := hostmetrics.New()
	ctlStore := hm.Store(st) // the controller's and the heartbeat's store errors are counted
	registry := hosts.Registry{Store: ctlStore, DownAfter: cfg.HostDownAfter}
	if cfg.LUKSIterTime < 0 {
		return configErrorf("--luks-iter-time %s: must not be negative", cfg.LUKSIterTime)
	}
	// A missing or wrong key-encryption key stops the daemon here: a new
	// key would make every stored secret unreadable.
	km, err := keys.Open(ctx, ctlStore, cfg.DataDir, keys.Options{Host: hostName})
	if err != nil {
		return fmt.Errorf("key manager: %w", err)
	}
	prober := encryption.NewProber(encryption.ProbeOptions{})
	// Key rotation: policies from the flags, procedures registered below
	// once the parts they need exist; interrupted rotations are recovered
	// before anything starts an instance or serves a request.
	keyEngine := newKeyEngine(ctlStore, hostName, log)
	if err := applyPolicies(ctx, keyEngine, cfg.KeyRotation.Policies); err != nil {
		return err
	}
	keyKick := make(kicker, 1)
	// The reconciler starts once interrupted rotations are recovered.
	ctl := controller.NewStopped(ctlStore, hv.options(controller.Options{
		Reconciled:  keyKick.kick,
		Host:        hostName,
		Hosts:       registry,
		DataDir:     cfg.DataDir,
		Render:      metadata.Options{DHCPDomain: cfg.DHCPDomain},
		Notify:      md,
		Logger:      log,
		DriveFormat: format,
		Observe:     hm.Observe,
		Encryption:  encHost,
		Devices:     inv,
		Audit:       audit,

		Keys:              km,
		LUKSIterTime:      cfg.LUKSIterTime,
		EncryptionSupport: prober.Support,
		ProxyNetworks:     mdOpts.TrustedProxies, // no instance at a trusted proxy's address
		Parts:             Parts(inv),            // parts.go
	}))
	defer ctl.Close() // stops the reconciler before the store closes
	keyEngine.Register(keyrotation.KEK, keyrotation.NewKEKRotator(km))
	if km.KEK().Created {
		if err := keyEngine.MarkCreated(ctx, keyrotation.Subject{Class: keyrotation.KEK}); err != nil {
			return fmt.Errorf("key rotation status: %w", err)
		}
	}
	// The token signing key and the proxy secret: rotated in two phases
	// (accepted everywhere, then current), the metadata readers following
	// on the store's feed.
	tokenKeys, proxyKeys := metadatakeys.Register(keyEngine, mdOpts, st, log)
	if err := markKeyFilesCreated(ctx, keyEngine, mdOpts); err != nil { // keyrotation.go
		return err
	}
	registerDiskRotation(keyEngine, ctl) // keyrotation.go
	if err := keyEngine.Recover(ctx); err != nil {
		return fmt.Errorf("key rotation: %w", err)
	}
	ctl.StartReconciler()
	keyCtx, stopKeys := context.WithCancel(ctx)
	keysDone := make(chan struct{})
	go func() {
		defer close(keysDone)
		var expiring sync.WaitGroup
		if tokenKeys != nil {
			// Token keys older than the longest token lifetime go.
			expiring.Go(func() { tokenKeys.ExpireLoop(keyCtx, 0) })
		}
		runKeyRotation(keyCtx, keyEngine, keyKick, cfg.KeyRotation.Interval, log)
		expiring.Wait()
	}()
	defer func() { stopKeys(); <-keysDone }() // before the controller closes
	keySvc := keyService{Engine: keyEngine, instances: ctlStore, proxy: proxyKeys}
	shareSvc := newShares(cfg, ctlStore, ctl, hostName, log)
	defer shareSvc.Close() // before the controller's reconciler stops
	if err := hm.Register(mdOpts.Registry, hv.metricSources(hostmetrics.Sources{
		Instances: ctl,
		Hosts: func(ctx context.Context) ([]hosts.Status, error) {
			return hosts.List(ctx, ctlStore, time.Now(), cfg.HostDownAfter)
		},
	})); err != nil {
		return err
	}

	beater := &hosts.Beater{Store: ctlStore, Host: hostName, Version: version.String(), Interval: cfg.HeartbeatInterval, Log: log,
		Holder: holder, DownAfter: cfg.HostDownAfter,
		Traits: func() []string {
			if s, ok := prober.Ready(); ok {
				return hostTraits(hv.conn != nil, s, encHost.Formats)
			}
			return nil
		},
		Count: func(ctx context.Context) (int, error) {
			l, err := ctl.List(ctx)
			return len(l), err
		}}
	if err := beater.Beat(ctx); err != nil {
		return fmt.Errorf("first heartbeat: %w", err)
	}
	beatCtx, stopBeat := context.WithCancel(ctx)
	beatDone := make(chan struct{})
	go func() { defer close(beatDone); beater.Run(beatCtx) }()
	// The traits are known once the encryption probe is done: publish
	// them then rather than at the next beat.
	probeBeat := make(chan struct{})
	go func() {
		defer close(probeBeat)
		if s, err := prober.Support(beatCtx); err == nil {
			if err := beater.Beat(beatCtx); err != nil && beatCtx.Err() == nil {
				log.Warn("heartbeat with the host's traits not written", "err", err)
			} else if err == nil {
				log.Info("host traits published", "traits", strings.Join(hostTraits(hv.conn != nil, s, encHost.Formats), ","))
			}
		}
	}()
	defer func() {
		stopBeat()
		<-beatDone
		<-probeBeat
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := beater.Stop(sctx); err != nil {
			log.Warn("last heartbeat (stopped) not written", "err", err)
		}
	}()

	var tokenAuth *auth.TokenAuth
	switch {
	case cfg.AdminListen == "" && cfg.AdminTokensFile != "":
		return configErrorf("--admin-tokens-file needs --admin-listen")
	case cfg.AdminListen != "" && cfg.AdminTokensFile == "":
		return configErrorf("--admin-listen needs --admin-tokens-file (the TCP admin API always requires tokens)")
	case (cfg.AdminTLSCert == "") != (cfg.AdminTLSKey == ""):
		return configErrorf("--admin-tls-cert and --admin-tls-key go together")
	case cfg.AdminListen != "":
		if tokenAuth, err = auth.LoadTokens(cfg.AdminTokensFile); err != nil {
			return fmt.Errorf("--admin-tokens-file: %w", err)
		}
	}

	adminLn, err := listenAdmin(cfg.Socket, cfg.SocketGroup, log)
	if err != nil {
		return err
	}
	mdLn, err := net.Listen("tcp", cfg.MetadataListen)
	if err != nil {
		adminLn.Close()
		return fmt.Errorf("metadata listener: %w", err)
	}
	var metricsLn net.Listener
	if cfg.Metadata.MetricsListen != "" {
		if metricsLn, err = net.Listen("tcp", cfg.Metadata.MetricsListen); err != nil {
			adminLn.Close()
			mdLn.Close()
			return fmt.Errorf("metadata metrics listener: %w", err)
		}
	}

	adminSrv := &http.Server{Handler: api.NewHandler(adminServices(ctl, inv, shareSvc, keySvc), log, auth.LocalAuth{}), ReadHeaderTimeout: adminReadHeaderTimeout}
	// The guest-facing server carries the metadata service's timeouts,
	// header limit and per-address connection limit.
	mdSrv := md.HTTPServer()
	srvs := []*http.Server{adminSrv, mdSrv}

	errc := make(chan error, 4)
	go func() { errc <- adminSrv.Serve(adminLn) }()
	go func() { errc <- mdSrv.Serve(md.Listener(mdLn)) }()
	logArgs := []any{"admin_socket", cfg.Socket, "metadata", mdLn.Addr().String(), "store", storeName(cfg.Store, cfg.DataDir)}
	if metricsLn != nil {
		metricsSrv := &http.Server{Handler: md.MetricsHandler(), ReadHeaderTimeout: server.ReadHeaderTimeout}
		srvs = append(srvs, metricsSrv)
		go func() { errc <- metricsSrv.Serve(metricsLn) }()
		logArgs = append(logArgs, "metadata_metrics", metricsLn.Addr().String())
	}
	if tokenAuth != nil {
		tcpLn, err := net.Listen("tcp", cfg.AdminListen)
		if err != nil {
			shutdown(srvs...)
			return fmt.Errorf("admin listener: %w", err)
		}
		tcpSrv := &http.Server{Handler: api.NewHandler(adminServices(ctl, inv, shareSvc, keySvc), log, tokenAuth), ReadHeaderTimeout: adminReadHeaderTimeout}
		srvs = append(srvs, tcpSrv)
		if cfg.AdminTLSCert != "" {
			go func() { errc <- tcpSrv.ServeTLS(tcpLn, cfg.AdminTLSCert, cfg.AdminTLSKey) }()
		} else {
			go func() { errc <- tcpSrv.Serve(tcpLn) }()
		}
		logArgs = append(logArgs, "admin_tcp", tcpLn.Addr().String(), "admin_tls", cfg.AdminTLSCert != "")
	}
	// Follow the store's change feed (other hosts and processes publish
	// too) and sweep the cache; this process's own publishes also reach
	// the cache at once through Invalidate.
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = md.Run(runCtx)
	}()
	go md.ReloadOnHangup(runCtx) // SIGHUP: re-read the metadata key files
	stop := func() {
		shutdown(srvs...)
		stopRun()
		<-runDone
	}
	log.Info("hostctl serving", logArgs...)

	for _, f := range cfg.Apply {
		if err := applyAtStart(ctx, ctl, f, mdLn.Addr().String(), cfg.Socket, stdout); err != nil {
			stop()
			return err
		}
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			stop()
			return fmt.Errorf("serve: %w", err)
		}
	}
	stop()
	return nil
}

// storeName names the store for logs, never with credentials.
func storeName(url, dataDir string) string {
	if storeurl.IsEmbedded(url) {
		return storeurl.EmbeddedPath(dataDir)
	}
	return storeurl.Redact(url)
}

func shutdown(srvs ...*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	for _, s := range srvs {
		_ = s.Shutdown(ctx)
	}
}

// staleSocketProbe bounds the dial that tells a running daemon's socket
// from a stale one.
const staleSocketProbe = time.Second

func applyAtStart(ctx context.Context, ctl *controller.Controller, file, mdAddr, socket string, stdout io.Writer) error {
	spec, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--apply: %w", err)
	}
	inst, err := ctl.Apply(ctx, spec)
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
