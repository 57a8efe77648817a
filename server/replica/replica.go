// Package replica runs vmeta-metadata: a metadata service with no host
// controller, serving the documents a shared store (Redis) holds and
// following the store's change feed, so that any number of replicas can
// stand behind the metadata address. It never imports host code.
package replica

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/server"
)

// DefaultListen is Nova's metadata port on loopback.
const DefaultListen = "127.0.0.1:8775"

// Env is what Run may touch.
type Env struct {
	Stdout, Stderr io.Writer
	// Getenv reads the environment (the store password,
	// storeurl.PasswordEnv); os.Getenv when nil.
	Getenv func(string) string
}

const usage = `vmeta-metadata — a vmeta metadata service replica

Usage:
  vmeta-metadata --store redis://host:6379/0 [--listen 127.0.0.1:8775] [flags]

It serves the documents hostctl publishes to the store, identifies guests by
source address (or trusted proxies' headers), and follows the store's change
feed. It re-reads the proxy secret and token key files when a key rotation is
announced on the feed, every --key-check-interval, and on SIGHUP.
"vmeta-metadata man" prints its manual page (roff). Flags:
`

// Run runs vmeta-metadata with args (without the program name) until ctx
// is done, and returns the process exit status: 0, 1 on error, 2 on a
// usage error.
func Run(ctx context.Context, args []string, env Env) int {
	err := run(ctx, args, env)
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(env.Stderr, "vmeta-metadata: %v\n", err)
		return 2
	default:
		fmt.Fprintf(env.Stderr, "vmeta-metadata: %v\n", err)
		return 1
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// flags are vmeta-metadata's flags.
type flags struct {
	cfg      server.Config
	storeURL string
	// passwordFile holds the store's password.
	passwordFile string
	listen       string
	logLevel     string
}

// register adds the flags to fs (the command line, and the manual page).
func (f *flags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.storeURL, "store", "", "store: redis://[user@]host:port/db, rediss://…, redis+cluster://…, redis+sentinel://…, or bolt:///path/file.db (a file no other process has open); the password goes in --store-password-file or $"+storeurl.PasswordEnv+", never in the URL (every user sees a command line)")
	fs.StringVar(&f.passwordFile, "store-password-file", "", "file holding the store's password (first line); without it $"+storeurl.PasswordEnv+" is used when set")
	fs.StringVar(&f.listen, "listen", DefaultListen, "address of the guest-facing metadata service")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.cfg.AddFlags(fs, "", "")
}

func run(ctx context.Context, args []string, env Env) error {
	if len(args) == 1 && args[0] == "man" {
		return writeManual(env.Stdout)
	}
	var f flags
	fs := flag.NewFlagSet("vmeta-metadata", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprint(env.Stderr, usage)
		fs.PrintDefaults()
	}
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() != 0 {
		return usageError{"no arguments expected"}
	}
	if f.storeURL == "" {
		return usageError{"--store is required"}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return usageError{fmt.Sprintf("--log-level %q", f.logLevel)}
	}
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))

	opts, err := f.cfg.Options(log)
	if err != nil {
		return err
	}
	pw, err := storeurl.Password(f.passwordFile, env.Getenv)
	if err != nil {
		return usageError{err.Error()}
	}
	if storeurl.URLHasPassword(f.storeURL) {
		log.Warn(storeurl.PasswordWarning, "store", storeurl.Redact(f.storeURL))
	}
	st, err := storeurl.Open(ctx, f.storeURL, storeurl.WithPassword(pw))
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	s := server.New(st, opts)

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var mln net.Listener
	if f.cfg.MetricsListen != "" {
		if mln, err = net.Listen("tcp", f.cfg.MetricsListen); err != nil {
			ln.Close()
			return fmt.Errorf("metrics listener: %w", err)
		}
	}
	return Serve(ctx, s, ln, mln, log, "store", storeurl.Redact(f.storeURL))
}

// Serve serves s on ln (with the per-address connection limit), the
// operator endpoints on mln (nil: none), and follows the store (s.Run),
// until ctx is done; then it shuts the listeners down, letting requests
// in flight finish for up to 5 seconds. logArgs are added to the start-up
// log line.
func Serve(ctx context.Context, s *server.Server, ln, mln net.Listener, log *slog.Logger, logArgs ...any) error {
	srv := s.HTTPServer()
	srvs := []*http.Server{srv}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(s.Listener(ln)) }()
	attrs := []any{"listen", ln.Addr().String()}
	if mln != nil {
		msrv := &http.Server{Handler: s.MetricsHandler(), ReadHeaderTimeout: server.ReadHeaderTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
		srvs = append(srvs, msrv)
		go func() { errc <- msrv.Serve(mln) }()
		attrs = append(attrs, "metrics", mln.Addr().String())
	}
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(runCtx) })
	wg.Go(func() { s.ReloadOnHangup(runCtx) })
	log.Info("vmeta-metadata serving", append(attrs, logArgs...)...)

	var err error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err = <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		} else {
			err = fmt.Errorf("serve: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, h := range srvs {
		_ = h.Shutdown(sctx)
	}
	stopRun()
	wg.Wait()
	return err
}
