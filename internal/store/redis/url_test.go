package redis

import (
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

func TestParseTargetCluster(t *testing.T) {
	tg, err := parseTarget("rediss+cluster://vmeta:p%40ss@h1:7000,h2,[::1]:7002?dial_timeout=3s")
	if err != nil {
		t.Fatalf("parseTarget: %v", err)
	}
	c := tg.newClient().(*goredis.ClusterClient)
	defer c.Close()
	o := c.Options()
	if !slices.Equal(o.Addrs, []string{"h1:7000", "h2:6379", "[::1]:7002"}) || o.Username != "vmeta" || o.Password != "p@ss" ||
		o.TLSConfig == nil || o.DialTimeout.Seconds() != 3 {
		t.Fatalf("cluster options = %+v", o)
	}
	if tg.desc != "cluster h1:7000,h2:6379,[::1]:7002" {
		t.Errorf("desc = %q", tg.desc)
	}
}

func TestParseTargetSentinel(t *testing.T) {
	tg, err := parseTarget("redis+sentinel://u:p@w@mymaster@s1:5000,s2/3?sentinel_password=sp&read_timeout=2s")
	if err != nil {
		t.Fatalf("parseTarget: %v", err)
	}
	c := tg.newClient()
	defer c.Close()
	if want := "sentinel mymaster@s1:5000,s2:26379 (db 3)"; tg.desc != want {
		t.Errorf("desc = %q, want %q", tg.desc, want)
	}
	if !slices.Contains(tg.secrets, "p@w") || !slices.Contains(tg.secrets, "sp") {
		t.Errorf("secrets to scrub = %q", tg.secrets)
	}
	// The options are checked through a second parse: go-redis does not
	// expose a FailoverClient's options.
	tg2, err := parseTarget("redis+sentinel://mymaster@s1/0")
	if err != nil || tg2.desc != "sentinel mymaster@s1:26379 (db 0)" {
		t.Fatalf("parseTarget without credentials = %q, %v", tg2.desc, err)
	}
}

func TestParseTargetErrors(t *testing.T) {
	const password = "s3cr3t-Pa55"
	for _, tc := range []struct{ url, want string }{
		{"http://h:1", "unknown scheme"},
		{"redis+cluster://h1:1/2", "only database 0"},
		{"redis+cluster://h1:1,,h2:2", "empty host"},
		{"redis+cluster://u:" + password + "@h1:1?addr=h2:2", "addr"},
		{"redis+cluster://u:" + password + "@h1:1?nope=1", "nope"},
		{"redis+sentinel://h1:1/0", "master name"},
		{"redis+sentinel://@h1:1/0", "empty master"},
		{"redis+sentinel://u:" + password + "@m@h1:1/x", "database"},
		{"redis+sentinel://m@h1:1/0?password=" + password, "not allowed"},
		{"redis+sentinel://m@h1:1/0?sentinel_password=" + password + "&bogus=1", "bogus"},
		{"redis+ring://h1:1", "unknown scheme"},
		{"redis+cluster://h1:1#frag", "fragment"},
	} {
		_, err := parseTarget(tc.url)
		if err == nil {
			t.Errorf("parseTarget(%s) succeeded", redactURL(tc.url))
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.want) || strings.Contains(msg, password) {
			t.Errorf("parseTarget(%s): %q; want %q and no password", redactURL(tc.url), msg, tc.want)
		}
	}
}
