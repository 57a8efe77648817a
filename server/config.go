package server

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Config is the command-line configuration of the metadata service,
// shared by vmeta-metadata and hostctl serve (whose flags carry a
// "metadata-" prefix). Options turns it into server Options.
type Config struct {
	// MetricsListen is the address of the operator listener (/metrics,
	// /healthz); "" for none.
	MetricsListen string
	// TrustedProxies is a comma-separated list of networks (CIDR) or
	// addresses whose peers may name the guest: by the signed proxy
	// headers when ProxySecretFile is set, else by X-Forwarded-For (its
	// right-most entry outside these networks). An address in them never
	// names a guest itself.
	TrustedProxies string
	// ProxySecretFile holds the shared secret(s) of X-Instance-ID-Signature,
	// current first (ReadKeyFile). Without it X-Instance-ID is never
	// honoured.
	ProxySecretFile string
	// TokenKeyFile holds the session-token key(s), current first; created
	// with a new random key when absent. "": a random key per process.
	// Replicas behind one address must share the file.
	TokenKeyFile string
	// TokenPolicy is optional or required.
	TokenPolicy string
	// AccessLog logs one line per request.
	AccessLog bool
	// RateLimit, RateBurst, MaxConnsPerAddr and SweepInterval are as in
	// Options.
	RateLimit       float64
	RateBurst       int
	MaxConnsPerAddr int
	SweepInterval   time.Duration
	// WarmInstances is as in Options (0 here: none).
	WarmInstances int
	// KeyCheckInterval is how often the key files are compared with the
	// keys loaded (Options.KeyCheckInterval), besides the store's change
	// feed announcing a rotation and SIGHUP.
	KeyCheckInterval time.Duration
	// GCHeapFloor is Options.GCHeapFloor in bytes (0 or negative: none).
	GCHeapFloor int64
}

// AddFlags registers the configuration's flags on fs, each name prefixed
// with prefix ("" or "metadata-"); tokenKeyFile is the default of the
// token key file flag.
func (c *Config) AddFlags(fs *flag.FlagSet, prefix, tokenKeyFile string) {
	fs.StringVar(&c.MetricsListen, prefix+"metrics-listen", "", "address of the operator listener for /metrics and /healthz (empty: none)")
	fs.StringVar(&c.TrustedProxies, prefix+"trusted-proxies", "", "comma-separated networks (CIDR) or addresses of metadata proxies that name the guest: by signed X-Instance-ID headers with a proxy secret, else by the X-Forwarded-For entry they added (right-most outside these networks); no instance may have an address in them")
	fs.StringVar(&c.ProxySecretFile, prefix+"proxy-secret-file", "", "file holding the proxy shared secret (one per line, current first); with it trusted proxies must sign (X-Instance-ID-Signature) and X-Forwarded-For is not honoured; without it X-Instance-ID is never honoured")
	fs.StringVar(&c.TokenKeyFile, prefix+"token-key-file", tokenKeyFile, "file holding the session-token signing key (one per line, current first); created (mode 0600) when absent; empty: a random key per process. Replicas must share it")
	fs.StringVar(&c.TokenPolicy, prefix+"token-policy", string(TokenOptional), "session tokens (PUT /latest/api/token): optional or required")
	fs.BoolVar(&c.AccessLog, prefix+"access-log", true, "log one line per metadata request (never query strings, headers, bodies or tokens)")
	fs.Float64Var(&c.RateLimit, prefix+"rate-limit", DefaultRateLimit, "requests per second per instance (0 or negative: no limit)")
	fs.IntVar(&c.RateBurst, prefix+"rate-burst", DefaultRateBurst, "burst of requests per instance above the rate")
	fs.IntVar(&c.MaxConnsPerAddr, prefix+"max-conns-per-address", DefaultMaxConnsPerAddr, "open connections per source address (trusted proxies exempt; 0 or negative: no limit)")
	fs.IntVar(&c.WarmInstances, prefix+"warm-instances", DefaultWarmInstances, "instances of the store read into the cache at the start, ahead of their guests' first boot requests (published ones are read as they are published; 0 or negative: none)")
	fs.DurationVar(&c.SweepInterval, prefix+"sweep-interval", DefaultSweepInterval, "how often cached documents are compared with the store's versions (0 or negative: never; on a store whose change feed loses nothing unsaid, the embedded one, only whether the store answers is checked)")
	fs.Int64Var(&c.GCHeapFloor, prefix+"gc-heap-floor", DefaultGCHeapFloor, "bytes the process's heap may grow beyond its live heap before the garbage collector runs, at least (fewer collections under load for that much memory; 0 or negative: the runtime's default pacing; off when GOGC or GOMEMLIMIT is set)")
	fs.DurationVar(&c.KeyCheckInterval, prefix+"key-check-interval", DefaultKeyCheckInterval, "how often the proxy secret and token key files are re-read if changed, besides when the store's change feed announces a key rotation and on SIGHUP (0 or negative: never); a key rotation waits this long (twice) before a new token key signs")
}

// Options reads the key files (creating the token key file if needed)
// and returns the server options the configuration describes. Keys are
// never logged; only the files' names and how many keys they hold.
func (c *Config) Options(log *slog.Logger) (Options, error) {
	o := Options{
		Logger: log, AccessLog: c.AccessLog, Metrics: c.MetricsListen != "",
		RateLimit: c.RateLimit, RateBurst: c.RateBurst, MaxConnsPerAddr: c.MaxConnsPerAddr,
		SweepInterval: c.SweepInterval, KeyCheckInterval: c.KeyCheckInterval, WarmInstances: c.WarmInstances,
		GCHeapFloor: c.GCHeapFloor,
	}
	if o.WarmInstances == 0 {
		o.WarmInstances = -1
	}
	if o.RateLimit == 0 {
		o.RateLimit = -1 // 0 on the command line means none, not the default
	}
	if o.MaxConnsPerAddr == 0 {
		o.MaxConnsPerAddr = -1
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = -1
	}
	if o.KeyCheckInterval == 0 {
		o.KeyCheckInterval = -1
	}
	var err error
	if o.TokenPolicy, err = ParseTokenPolicy(c.TokenPolicy); err != nil {
		return Options{}, err
	}
	if o.TrustedProxies, err = ParsePrefixes(c.TrustedProxies); err != nil {
		return Options{}, fmt.Errorf("trusted proxies %q: %w", c.TrustedProxies, err)
	}
	if c.ProxySecretFile != "" {
		f := NewKeyFile("proxy", c.ProxySecretFile, &KeyRing{}, log)
		if _, err := f.reloadQuiet(); err != nil {
			return Options{}, fmt.Errorf("proxy secret: %w", err)
		}
		warnReadable(log, c.ProxySecretFile)
		o.ProxySecrets = f.Ring()
		o.KeyFiles = append(o.KeyFiles, f)
		log.Info("metadata proxy secret loaded", "file", c.ProxySecretFile, "keys", len(f.Ring().All()), "generation", f.Generation())
	}
	switch {
	case len(o.TrustedProxies) == 0 && o.ProxySecrets != nil:
		log.Warn("a proxy secret without trusted proxies: proxy headers are never honoured")
	case len(o.TrustedProxies) > 0 && o.ProxySecrets == nil:
		log.Info("no proxy secret: trusted proxies name the guest by the X-Forwarded-For entry they add (the right-most outside the trusted networks); X-Instance-ID is never honoured")
	case len(o.TrustedProxies) > 0:
		log.Info("proxy secret: trusted proxies must name the guest with signed X-Instance-ID headers; X-Forwarded-For is not honoured")
	}
	if c.TokenKeyFile != "" {
		_, created, err := ReadOrCreateKeyFile(c.TokenKeyFile)
		if err != nil {
			return Options{}, fmt.Errorf("token key: %w", err)
		}
		if created {
			log.Info("metadata token key created", "file", c.TokenKeyFile)
		}
		warnReadable(log, c.TokenKeyFile)
		f := NewKeyFile("token", c.TokenKeyFile, &KeyRing{}, log)
		f.created = created
		if _, err := f.reloadQuiet(); err != nil {
			return Options{}, fmt.Errorf("token key: %w", err)
		}
		o.TokenKeys = f.Ring()
		o.KeyFiles = append(o.KeyFiles, f)
	} else {
		log.Warn("no token key file: session tokens are signed with a key of this process only (they do not survive a restart nor work across replicas)")
	}
	return o, nil
}

// warnReadable warns when a key file can be read by others than its
// owner.
func warnReadable(log *slog.Logger, path string) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("key file is accessible to group or others; it should be mode 0600", "file", path, "mode", fi.Mode().Perm().String())
	}
}
