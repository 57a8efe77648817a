package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/server"
	"github.com/vmeta/vmeta/server/replica"
)

type serveConfig struct {
	dataDir        string
	socket         string
	metadataListen string
	storeURL       string
	dhcpDomain     string
	driveFormat    string
	logLevel       string
	apply          []string
	metadata       server.Config

	// The optional TCP admin listener (bearer tokens, roles).
	adminListen     string
	adminTokensFile string
	adminTLSCert    string
	adminTLSKey     string
}

// tokenKeyFile is the session-token key file's name in the data directory.
const tokenKeyFile = "metadata-token.key"

// OpenStore opens the store a --store value names: "" or "bolt" for the
// embedded store in dataDir; otherwise what the metadata replica accepts
// (bolt:///path, redis://, rediss://, redis+cluster://, redis+sentinel://).
func OpenStore(ctx context.Context, url, dataDir string) (store.Store, error) {
	if url == "" || url == "bolt" {
		return bolt.Open(filepath.Join(dataDir, "vmeta.db"))
	}
	return replica.OpenStore(ctx, url)
}

func serve(ctx context.Context, args []string, env Env) error {
	var cfg serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.StringVar(&cfg.dataDir, "data-dir", DefaultDataDir, "data directory (embedded store, config drives)")
	fs.StringVar(&cfg.socket, "socket", DefaultSocket(), "admin API unix socket")
	fs.StringVar(&cfg.metadataListen, "metadata-listen", DefaultMetadataListen, "address of the guest-facing metadata service")
	fs.StringVar(&cfg.storeURL, "store", "bolt", "store: bolt (embedded, in the data directory), bolt:///path/file.db, redis://host:port/db, redis+cluster://h1:p1,h2:p2 or redis+sentinel://master@h1:p1/db")
	fs.StringVar(&cfg.dhcpDomain, "dhcp-domain", "novalocal", "domain appended to short hostnames in metadata (Nova's dhcp_domain)")
	fs.StringVar(&cfg.driveFormat, "config-drive-format", "iso9660", "format of the config drives kept in the data directory: iso9660 or vfat")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&cfg.adminListen, "admin-listen", "", "TCP address of the admin API for remote clients (needs --admin-tokens-file)")
	fs.StringVar(&cfg.adminTokensFile, "admin-tokens-file", "", "JSON list of admin API tokens (name, role admin|member, project, sha256); see `hostctl token new`")
	fs.StringVar(&cfg.adminTLSCert, "admin-tls-cert", "", "TLS certificate for --admin-listen (with --admin-tls-key; without them the listener is plain HTTP: bind it to a management network)")
	fs.StringVar(&cfg.adminTLSKey, "admin-tls-key", "", "TLS key for --admin-listen")
	fs.Func("apply", "apply an instance spec at start-up (repeatable)", func(s string) error {
		cfg.apply = append(cfg.apply, s)
		return nil
	})
	cfg.metadata.AddFlags(fs, "metadata-", filepath.Join(DefaultDataDir, tokenKeyFile))
	vc := addVirtFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	keyFileSet := false
	fs.Visit(func(f *flag.Flag) { keyFileSet = keyFileSet || f.Name == "metadata-token-key-file" })
	if !keyFileSet {
		// The token key lives in the data directory, wherever that is.
		cfg.metadata.TokenKeyFile = filepath.Join(cfg.dataDir, tokenKeyFile)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: serve takes no arguments", errUsage)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level %q", errUsage, cfg.logLevel)
	}
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
	format := configdrive.Format(cfg.driveFormat)
	if format != configdrive.ISO9660 && format != configdrive.VFAT {
		return fmt.Errorf("%w: --config-drive-format %q: must be iso9660 or vfat", errUsage, cfg.driveFormat)
	}
	if err := os.MkdirAll(cfg.dataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}

	st, err := OpenStore(ctx, cfg.storeURL, cfg.dataDir)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()

	mdOpts, err := cfg.metadata.Options(log)
	if err != nil {
		return fmt.Errorf("metadata service: %w", err)
	}
	md := server.New(st, mdOpts)
	if err := vc.connect(ctx, log); err != nil {
		return err
	}
	defer vc.close()
	ctl := controller.New(st, vc.options(controller.Options{
		DataDir:     cfg.dataDir,
		Render:      metadata.Options{DHCPDomain: cfg.dhcpDomain},
		Notify:      md,
		Logger:      log,
		DriveFormat: format,
	}))
	defer ctl.Close() // stops the reconciler before the store closes

	var tokenAuth *auth.TokenAuth
	switch {
	case cfg.adminListen == "" && cfg.adminTokensFile != "":
		return fmt.Errorf("%w: --admin-tokens-file needs --admin-listen", errUsage)
	case cfg.adminListen != "" && cfg.adminTokensFile == "":
		return fmt.Errorf("%w: --admin-listen needs --admin-tokens-file (the TCP admin API always requires tokens)", errUsage)
	case (cfg.adminTLSCert == "") != (cfg.adminTLSKey == ""):
		return fmt.Errorf("%w: --admin-tls-cert and --admin-tls-key go together", errUsage)
	case cfg.adminListen != "":
		if tokenAuth, err = auth.LoadTokens(cfg.adminTokensFile); err != nil {
			return fmt.Errorf("--admin-tokens-file: %w", err)
		}
	}

	adminLn, err := listenUnix(cfg.socket)
	if err != nil {
		return err
	}
	mdLn, err := net.Listen("tcp", cfg.metadataListen)
	if err != nil {
		adminLn.Close()
		return fmt.Errorf("metadata listener: %w", err)
	}
	var metricsLn net.Listener
	if cfg.metadata.MetricsListen != "" {
		if metricsLn, err = net.Listen("tcp", cfg.metadata.MetricsListen); err != nil {
			adminLn.Close()
			mdLn.Close()
			return fmt.Errorf("metadata metrics listener: %w", err)
		}
	}

	adminSrv := &http.Server{Handler: api.Handler(ctl, log), ReadHeaderTimeout: 10 * time.Second}
	// The guest-facing server carries the metadata service's timeouts,
	// header limit and per-address connection limit.
	mdSrv := md.HTTPServer()
	srvs := []*http.Server{adminSrv, mdSrv}

	errc := make(chan error, 4)
	go func() { errc <- adminSrv.Serve(adminLn) }()
	go func() { errc <- mdSrv.Serve(md.Listener(mdLn)) }()
	logArgs := []any{"admin_socket", cfg.socket, "metadata", mdLn.Addr().String(), "store", storeName(cfg.storeURL, cfg.dataDir)}
	if metricsLn != nil {
		metricsSrv := &http.Server{Handler: md.MetricsHandler(), ReadHeaderTimeout: server.ReadHeaderTimeout}
		srvs = append(srvs, metricsSrv)
		go func() { errc <- metricsSrv.Serve(metricsLn) }()
		logArgs = append(logArgs, "metadata_metrics", metricsLn.Addr().String())
	}
	if tokenAuth != nil {
		tcpLn, err := net.Listen("tcp", cfg.adminListen)
		if err != nil {
			shutdown(srvs...)
			return fmt.Errorf("admin listener: %w", err)
		}
		tcpSrv := &http.Server{Handler: api.NewHandler(ctl, log, tokenAuth), ReadHeaderTimeout: 10 * time.Second}
		srvs = append(srvs, tcpSrv)
		if cfg.adminTLSCert != "" {
			go func() { errc <- tcpSrv.ServeTLS(tcpLn, cfg.adminTLSCert, cfg.adminTLSKey) }()
		} else {
			go func() { errc <- tcpSrv.Serve(tcpLn) }()
		}
		logArgs = append(logArgs, "admin_tcp", tcpLn.Addr().String(), "admin_tls", cfg.adminTLSCert != "")
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
	stop := func() {
		shutdown(srvs...)
		stopRun()
		<-runDone
	}
	log.Info("hostctl serving", logArgs...)

	for _, f := range cfg.apply {
		if err := applyAtStart(ctx, ctl, f, mdLn.Addr().String(), cfg.socket, env); err != nil {
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
	if url == "" || url == "bolt" {
		return filepath.Join(dataDir, "vmeta.db")
	}
	return replica.StoreName(url)
}

func shutdown(srvs ...*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range srvs {
		_ = s.Shutdown(ctx)
	}
}

// listenUnix listens on a unix socket readable by its owner only,
// replacing a stale socket file left by a crashed daemon but refusing to
// steal the socket of a running one.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if _, err := os.Stat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("admin socket %s: another hostctl daemon is listening", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("admin socket: remove stale %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	return ln, nil
}

func applyAtStart(ctx context.Context, ctl *controller.Controller, file, mdAddr, socket string, env Env) error {
	spec, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--apply: %w", err)
	}
	inst, err := ctl.Apply(ctx, spec)
	if err != nil {
		return fmt.Errorf("--apply %s: %w", file, err)
	}
	s := inst.Spec
	fmt.Fprintf(env.Stdout, "instance %s applied (uuid %s) from %s\n", s.Name, s.UUID, file)
	fmt.Fprintf(env.Stdout, "  config drive: %s\n", inst.ConfigDrive)
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
		fmt.Fprintf(env.Stdout, "  its metadata, fetched from its address %s:\n", a)
		fmt.Fprintf(env.Stdout, "    curl -s %s/openstack/latest/meta_data.json\n", url)
		fmt.Fprintf(env.Stdout, "    curl -s %s/latest/meta-data/hostname\n", url)
	}
	fmt.Fprintf(env.Stdout, "  manage it: VMETA_SOCKET=%s hostctl instance show %s\n", socket, s.Name)
	return nil
}
