// Package storeurl opens the store a --store value names, for every
// program that takes one (hostctl serve, vmeta-metadata), and redacts such
// a value for logs.
//
// The forms:
//
//	"" or bolt                    the embedded store: vmeta.db in the data directory (WithDataDir)
//	bolt:///path/to/file.db       a bbolt file (bolt://relative/path is relative to the working directory)
//	redis://, rediss://, unix://  one Redis server
//	redis+cluster://…             a Redis Cluster
//	redis+sentinel://…            a primary found through Sentinel
//
// and rediss+cluster://, rediss+sentinel:// with TLS. The Redis forms are
// those of package redis (see its documentation for hosts, databases,
// credentials and options, among them min_replicas and replica_timeout:
// how many replicas must acknowledge a write before it is reported done,
// 1 by default through Sentinel). Schemes are case-insensitive.
package storeurl

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/store/redis"
)

// EmbeddedFile is the embedded store's file name in the data directory.
const EmbeddedFile = "vmeta.db"

// FileLockTimeout is how long Open waits for the lock of a bolt file named
// by a bolt:// URL (another process may be about to release it). The
// embedded store waits bolt.DefaultLockTimeout.
const FileLockTimeout = 2 * time.Second

// Schemes lists the schemes Open accepts, for messages.
const Schemes = "bolt, redis, rediss, unix, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel"

// Option adjusts Open.
type Option func(*options)

type options struct {
	dataDir  string
	password string
}

// WithPassword sets the password of the Redis servers that hold the data
// (replacing one in the URL); see Password for where it comes from. ""
// changes nothing; a bolt store ignores it.
func WithPassword(pw string) Option {
	return func(o *options) { o.password = pw }
}

// WithDataDir sets the data directory that holds the embedded store ("" or
// "bolt"). Without it those forms are an error.
func WithDataDir(dir string) Option {
	return func(o *options) { o.dataDir = dir }
}

// IsEmbedded reports whether rawURL names the embedded store ("" or
// "bolt").
func IsEmbedded(rawURL string) bool {
	return rawURL == "" || strings.EqualFold(rawURL, "bolt")
}

// EmbeddedPath returns the file of the embedded store in dataDir.
func EmbeddedPath(dataDir string) string { return filepath.Join(dataDir, EmbeddedFile) }

// Open opens the store rawURL names (see the package comment). Redis
// stores are reached once before Open returns. Errors name the URL only
// as Redact prints it.
func Open(ctx context.Context, rawURL string, opts ...Option) (store.Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if IsEmbedded(rawURL) {
		if o.dataDir == "" {
			return nil, fmt.Errorf("store %q: the embedded store needs a data directory (or name a file: bolt:///path/to/file.db)", rawURL)
		}
		return bolt.Open(EmbeddedPath(o.dataDir))
	}
	kind, path, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	switch kind {
	case kindBolt:
		return bolt.Open(path, bolt.WithLockTimeout(FileLockTimeout))
	default:
		return redis.Open(ctx, rawURL, redis.WithPassword(o.password))
	}
}

// Check checks a store URL's form as Open does, without opening or
// reaching anything: the embedded store, a bolt file's URL, or a Redis
// scheme. Its errors show the URL only as Redact prints it.
func Check(rawURL string) error {
	if IsEmbedded(rawURL) {
		return nil
	}
	_, _, err := parse(rawURL)
	return err
}

type kind int

const (
	kindBolt kind = iota + 1
	kindRedis
)

// parse checks rawURL's scheme (and, for bolt, its path), without
// connecting. It returns the file of a bolt URL.
func parse(rawURL string) (kind, string, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || scheme == "" {
		shown := fmt.Sprintf(" %q", rawURL)
		if strings.Contains(rawURL, "@") {
			shown = "" // it may hold a password, and Redact cannot tell where
		}
		return 0, "", fmt.Errorf("invalid store URL%s: no scheme (want bolt:///path/to/file.db, redis://host:port/db, redis+cluster://host:port,… or redis+sentinel://master@host:port,…/db)", shown)
	}
	switch strings.ToLower(scheme) {
	case "bolt":
		switch {
		case rest == "":
			return 0, "", fmt.Errorf("invalid store URL %s: no file (want bolt:///path/to/file.db)", Redact(rawURL))
		case strings.ContainsAny(rest, "?#"):
			return 0, "", fmt.Errorf("invalid store URL %s: a bolt URL takes no options or fragment (want bolt:///path/to/file.db)", Redact(rawURL))
		}
		return kindBolt, rest, nil
	case "redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel":
		return kindRedis, "", nil
	}
	return 0, "", fmt.Errorf("invalid store URL %s: unknown scheme %q (want %s)", Redact(rawURL), scheme, Schemes)
}

// Redact returns a store URL fit for logs and messages: no user, password,
// options (which may carry sentinel_password) or fragment. The user-info
// part becomes "…" (for redis+sentinel:// the master name stays); a value
// without a scheme becomes "(invalid store URL)". bolt URLs are returned
// as they are (a file name holds no credentials), and so is the embedded
// store's "bolt" ("" too).
//
// It errs on the side of hiding: everything up to the last "@" of the URL
// counts as user info, so that a password with an unescaped "/", "?" or
// "#" is hidden too.
func Redact(rawURL string) string {
	if IsEmbedded(rawURL) {
		return "bolt"
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || scheme == "" {
		return "(invalid store URL)"
	}
	if strings.EqualFold(scheme, "bolt") {
		return rawURL
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		pre, hosts := rest[:at], rest[at+1:]
		master := ""
		if strings.HasSuffix(strings.ToLower(scheme), "+sentinel") {
			if at2 := strings.LastIndex(pre, "@"); at2 >= 0 {
				master = pre[at2+1:] + "@"
			} else {
				master = pre + "@" // no user info: all of it is the master name
			}
		}
		if master != "" && !strings.Contains(pre, "@") {
			rest = master + hosts
		} else {
			rest = "…@" + master + hosts
		}
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	return scheme + "://" + rest
}
