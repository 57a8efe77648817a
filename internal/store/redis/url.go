package redis

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Default ports of a host named without one.
const (
	defaultPort         = "6379"
	defaultSentinelPort = "26379"
)

// target is a parsed store URL: a client for it, a description for
// messages (addresses, never a password) and the secrets to scrub from
// errors.
type target struct {
	newClient func() goredis.UniversalClient
	// setPassword replaces the password of the servers that hold the data
	// (WithPassword).
	setPassword func(string)
	desc        string
	secrets     []string
	// defaultReplicas is the scheme's default of min_replicas; replicas
	// what the URL's options set.
	defaultReplicas int
	replicas        durability
}

// parseTarget parses the URL forms the package comment lists.
func parseTarget(rawURL string) (target, error) {
	safe := redactURL(rawURL)
	rawURL, d, err := takeDurability(rawURL, safe)
	if err != nil {
		return target{}, err
	}
	t, err := parseClient(rawURL, safe)
	t.replicas = d
	return t, err
}

// takeDurability removes the options min_replicas and replica_timeout
// from the query of rawURL and returns what they say (minReplicas -1 and
// timeout 0 when absent).
func takeDurability(rawURL, safe string) (string, durability, error) {
	d := durability{minReplicas: -1}
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return rawURL, d, nil
	}
	query, frag, hasFrag := strings.Cut(query, "#")
	var kept []string
	for part := range strings.SplitSeq(query, "&") {
		k, v, _ := strings.Cut(part, "=")
		if u, err := url.QueryUnescape(v); err == nil {
			v = u
		}
		switch k {
		case "min_replicas":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return "", d, fmt.Errorf("invalid URL %s: min_replicas=%q is not a number of replicas (0 or more)", safe, v)
			}
			d.minReplicas = n
		case "replica_timeout":
			t, err := time.ParseDuration(v)
			if err != nil || t <= 0 {
				return "", d, fmt.Errorf("invalid URL %s: replica_timeout=%q is not a positive duration (such as 500ms or 2s)", safe, v)
			}
			d.timeout = t
		default:
			kept = append(kept, part)
		}
	}
	if len(kept) > 0 {
		base += "?" + strings.Join(kept, "&")
	}
	if hasFrag {
		base += "#" + frag
	}
	return base, d, nil
}

// parseClient parses a URL without the durability options.
func parseClient(rawURL, safe string) (target, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return target{}, fmt.Errorf("invalid URL %s: no scheme (want redis://[user:password@]host:port/db, redis+cluster://host:port,… or redis+sentinel://master@host:port,…/db)", safe)
	}
	switch base, kind, _ := strings.Cut(strings.ToLower(scheme), "+"); kind {
	case "":
		if base != "redis" && base != "rediss" && base != "unix" {
			break
		}
		opts, err := parseURL(rawURL)
		if err != nil {
			return target{}, err
		}
		opts.MaintNotificationsConfig = disabledMaint()
		return target{
			newClient:   func() goredis.UniversalClient { return goredis.NewClient(opts) },
			setPassword: func(pw string) { opts.Password = pw },
			desc:        fmt.Sprintf("%s (db %d)", opts.Addr, opts.DB),
			secrets:     []string{opts.Password},
		}, nil
	case "cluster":
		if base != "redis" && base != "rediss" {
			break
		}
		return parseCluster(base, rest, safe)
	case "sentinel":
		if base != "redis" && base != "rediss" {
			break
		}
		return parseSentinel(base, rest, safe)
	}
	return target{}, fmt.Errorf("invalid URL %s: unknown scheme %q (want redis, rediss, unix, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel)", safe, scheme)
}

func disabledMaint() *maintnotifications.Config {
	// Maintenance notifications are a Redis Cloud/Enterprise feature; the
	// default "auto" mode probes for them on every new connection.
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// splitURL splits what follows "scheme://" into the authority, the path
// and the raw query (a fragment is refused).
func splitURL(rest, safe string) (authority, path, query string, err error) {
	if strings.Contains(rest, "#") {
		return "", "", "", fmt.Errorf("invalid URL %s: fragment not allowed", safe)
	}
	rest, query, _ = strings.Cut(rest, "?")
	authority, path = rest, ""
	if i := strings.Index(rest, "/"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	return authority, path, query, nil
}

// parseUserinfo decodes "user:password" (percent-encoded as in a URL).
func parseUserinfo(userinfo, safe string) (user, password string, err error) {
	if userinfo == "" {
		return "", "", nil
	}
	u, err := url.Parse("redis://" + userinfo + "@localhost")
	if err != nil || u.User == nil {
		return "", "", fmt.Errorf("invalid URL %s: malformed user or password", safe)
	}
	password, _ = u.User.Password()
	return u.User.Username(), password, nil
}

// parseHosts splits a comma-separated host list, adding port to hosts
// named without one.
func parseHosts(list, port, safe string) ([]string, error) {
	var hosts []string
	for h := range strings.SplitSeq(list, ",") {
		if h == "" {
			return nil, fmt.Errorf("invalid URL %s: empty host in %q", safe, list)
		}
		host, p, err := net.SplitHostPort(h)
		if err != nil {
			// No port (a bracketed IPv6 literal or a name).
			host, p = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), port
			if strings.ContainsAny(host, "[]") {
				return nil, fmt.Errorf("invalid URL %s: bad host %q", safe, h)
			}
		}
		if host == "" || p == "" {
			return nil, fmt.Errorf("invalid URL %s: bad host %q", safe, h)
		}
		hosts = append(hosts, net.JoinHostPort(host, p))
	}
	return hosts, nil
}

// parseCluster: redis+cluster://[user:password@]host:port[,host:port…][/0][?options].
// The hosts are seeds; the client discovers the rest of the cluster.
func parseCluster(base, rest, safe string) (target, error) {
	authority, path, query, err := splitURL(rest, safe)
	if err != nil {
		return target{}, err
	}
	userinfo, hostList := "", authority
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hostList = authority[:at], authority[at+1:]
	}
	user, password, err := parseUserinfo(userinfo, safe)
	if err != nil {
		return target{}, err
	}
	hosts, err := parseHosts(hostList, defaultPort, safe)
	if err != nil {
		return target{}, err
	}
	if path != "" && path != "/" && path != "/0" {
		return target{}, fmt.Errorf("invalid URL %s: Redis Cluster has only database 0", safe)
	}
	if q, err := url.ParseQuery(query); err == nil && q.Has("addr") {
		return target{}, fmt.Errorf("invalid URL %s: option addr is not allowed (list the hosts in the authority)", safe)
	}
	// go-redis parses the options (timeouts, pool sizes) of the query.
	u := base + "://" + hosts[0]
	if query != "" {
		u += "?" + query
	}
	opts, err := goredis.ParseClusterURL(u)
	if err != nil {
		return target{}, fmt.Errorf("invalid URL %s: %w", safe, scrub(err, password))
	}
	opts.Addrs = hosts
	opts.Username, opts.Password = user, password
	opts.MaintNotificationsConfig = disabledMaint()
	return target{
		newClient:   func() goredis.UniversalClient { return goredis.NewClusterClient(opts) },
		setPassword: func(pw string) { opts.Password = pw },
		desc:        "cluster " + strings.Join(hosts, ","),
		secrets:     []string{password},
	}, nil
}

// parseSentinel: redis+sentinel://[user:password@]master@host:port[,host:port…][/db][?options].
// user and password are those of the Redis primary and replicas; the
// sentinels' own, if they require one, go in the sentinel_username and
// sentinel_password options.
func parseSentinel(base, rest, safe string) (target, error) {
	authority, path, query, err := splitURL(rest, safe)
	if err != nil {
		return target{}, err
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return target{}, fmt.Errorf("invalid URL %s: no master name (want redis+sentinel://master@host:port,…/db)", safe)
	}
	pre, hostList := authority[:at], authority[at+1:]
	userinfo, master := "", pre
	if at := strings.LastIndex(pre, "@"); at >= 0 {
		userinfo, master = pre[:at], pre[at+1:]
	}
	if master == "" {
		return target{}, fmt.Errorf("invalid URL %s: empty master name", safe)
	}
	if m, err := url.PathUnescape(master); err == nil {
		master = m
	}
	user, password, err := parseUserinfo(userinfo, safe)
	if err != nil {
		return target{}, err
	}
	hosts, err := parseHosts(hostList, defaultSentinelPort, safe)
	if err != nil {
		return target{}, err
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return target{}, fmt.Errorf("invalid URL %s: bad query", safe)
	}
	sentinelUser, sentinelPassword := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	for _, k := range []string{"master_name", "addr", "username", "password"} {
		if q.Has(k) {
			return target{}, fmt.Errorf("invalid URL %s: option %s is not allowed (put it in the URL's authority)", safe, k)
		}
	}
	u := base + "://" + hosts[0] + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	opts, err := goredis.ParseFailoverURL(u)
	if err != nil {
		return target{}, fmt.Errorf("invalid URL %s: %w", safe, scrub(scrub(err, password), sentinelPassword))
	}
	opts.MasterName = master
	opts.SentinelAddrs = hosts
	opts.Username, opts.Password = user, password
	opts.SentinelUsername, opts.SentinelPassword = sentinelUser, sentinelPassword
	return target{
		newClient:       func() goredis.UniversalClient { return goredis.NewFailoverClient(opts) },
		setPassword:     func(pw string) { opts.Password = pw },
		desc:            fmt.Sprintf("sentinel %s@%s (db %d)", master, strings.Join(hosts, ","), opts.DB),
		secrets:         []string{password, sentinelPassword},
		defaultReplicas: DefaultSentinelReplicas,
	}, nil
}

// parseURL is goredis.ParseURL with errors that never contain the password
// (net/url's errors quote the whole URL).
func parseURL(rawURL string) (*goredis.Options, error) {
	safe := redactURL(rawURL)
	if !strings.Contains(rawURL, "://") {
		return nil, fmt.Errorf("invalid URL %s: no scheme (want redis://[user:password@]host:port/db)", safe)
	}
	if _, err := url.Parse(rawURL); err != nil {
		if _, err := url.Parse(safe); err != nil {
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err
			}
			return nil, fmt.Errorf("invalid URL %s: %w", safe, err)
		}
		return nil, fmt.Errorf("invalid URL %s: malformed user or password", safe)
	}
	opts, err := goredis.ParseURL(rawURL)
	if err != nil {
		_, password := userinfo(rawURL)
		return nil, fmt.Errorf("invalid URL %s: %w", safe, scrub(err, password))
	}
	return opts, nil
}

// RedactURL returns a store URL fit for logs and messages: the user and
// password replaced by "xxxxx" (for redis+sentinel:// the master name
// stays), and so is the value of every query option whose name contains
// "password" (sentinel_password).
func RedactURL(rawURL string) string { return redactURL(rawURL) }

// redactURL replaces the user-info part of a URL, if any, with "xxxxx"
// (for redis+sentinel:// only the part before the master name), and the
// value of every query option whose name contains "password".
func redactURL(rawURL string) string {
	i := strings.Index(rawURL, "://")
	if i < 0 {
		return rawURL
	}
	scheme, rest := rawURL[:i], rawURL[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		if strings.HasSuffix(strings.ToLower(scheme), "+sentinel") {
			pre := authority[:at]
			if at2 := strings.LastIndex(pre, "@"); at2 >= 0 {
				authority = "xxxxx" + authority[at2:]
			}
		} else {
			authority = "xxxxx" + authority[at:]
		}
	}
	if q := strings.Index(tail, "?"); q >= 0 {
		query, frag, hasFrag := strings.Cut(tail[q+1:], "#")
		parts := strings.Split(query, "&")
		for j, p := range parts {
			if k, _, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(k), "password") {
				parts[j] = k + "=xxxxx"
			}
		}
		tail = tail[:q+1] + strings.Join(parts, "&")
		if hasFrag {
			tail += "#" + frag
		}
	}
	return scheme + "://" + authority + tail
}

// userinfo returns the user and (still escaped) password of a URL.
func userinfo(rawURL string) (user, password string) {
	i := strings.Index(rawURL, "://")
	if i < 0 {
		return "", ""
	}
	rest := rawURL[i+3:]
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return "", ""
	}
	user, password, _ = strings.Cut(rest[:at], ":")
	return user, password
}

// scrub returns err, or a copy of its text with secret masked if it
// contains secret (the copy no longer wraps err).
func scrub(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), secret, "xxxxx"))
}

// URLHasPassword reports whether rawURL carries a password (in its user
// information, or a password or sentinel_password option): a URL given on
// a command line shows it to every user of the machine (ps). A URL that
// does not parse reports false (Open reports the error).
func URLHasPassword(rawURL string) bool {
	t, err := parseTarget(rawURL)
	if err != nil {
		return false
	}
	for _, s := range t.secrets {
		if s != "" {
			return true
		}
	}
	return false
}
