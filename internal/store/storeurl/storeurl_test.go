package storeurl

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/store/storetest"
	"github.com/vmeta/vmeta/internal/testenv"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://user:pw@host:6379/0", "redis://…@host:6379/0"},
		{"redis://:p%40ss@host:6379/0?password=pw", "redis://…@host:6379/0"},
		{"redis+cluster://a:1,b:2", "redis+cluster://a:1,b:2"},
		{"bolt:///var/lib/vmeta/x.db", "bolt:///var/lib/vmeta/x.db"},
		{"bolt:///var/lib/vmeta/a@b.db", "bolt:///var/lib/vmeta/a@b.db"},
		{"nonsense", "(invalid store URL)"},
		{"://x", "(invalid store URL)"},
		{"", "bolt"},
		{"bolt", "bolt"},
		{"redis://localhost:6379/0", "redis://localhost:6379/0"},
		{"rediss://:p@ss@host/1?dial_timeout=3s", "rediss://…@host/1"},
		{"redis://host:6379?password=pw", "redis://host:6379"},
		{"redis://host/0#frag", "redis://host/0"},
		{"redis+cluster://u:p@h1,h2?dial_timeout=1s", "redis+cluster://…@h1,h2"},
		{"redis+sentinel://mymaster@h1,h2/0", "redis+sentinel://mymaster@h1,h2/0"},
		{"redis+sentinel://u:p@ss@mymaster@h1/0", "redis+sentinel://…@mymaster@h1/0"},
		{"redis+sentinel://m@h1/0?sentinel_password=x&a=b#f", "redis+sentinel://m@h1/0"},
		{"unix:///run/redis.sock?db=2&password=pw", "unix:///run/redis.sock"},
		// Unescaped "/", "?" or "#" in a password: hidden all the same.
		{"redis://:pa/ss@host/0", "redis://…@host/0"},
		{"redis://:pa?ss@host/0", "redis://…@host/0"},
		{"redis://:pa#ss@host/0", "redis://…@host/0"},
		{"http://u:pw@host", "http://…@host"},
	} {
		got := Redact(tc.in)
		if got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, secret := range []string{"pw", "p%40ss", "p@ss", "pa/ss", "pa?ss", "pa#ss", "sentinel_password"} {
			if strings.Contains(tc.in, secret) && strings.Contains(got, secret) {
				t.Errorf("Redact(%q) = %q keeps %q", tc.in, got, secret)
			}
		}
	}
}

func TestIsEmbedded(t *testing.T) {
	for in, want := range map[string]bool{"": true, "bolt": true, "BOLT": true, "bolt:///x.db": false, "redis://h": false} {
		if got := IsEmbedded(in); got != want {
			t.Errorf("IsEmbedded(%q) = %v, want %v", in, got, want)
		}
	}
}

// Bad URLs fail with an error that says what is wrong and never shows a
// password.
func TestOpenErrors(t *testing.T) {
	const password = "s3cr3t-Pa55"
	dir := t.TempDir()
	unreachable := testenv.ClosedAddr(t)
	for _, tc := range []struct {
		name, url string
		opts      []Option
		want      []string // substrings of the error
	}{
		{"embedded without a data directory", "bolt", nil, []string{"data directory", "bolt:///path/to/file.db"}},
		{"empty without a data directory", "", nil, []string{"data directory"}},
		{"no scheme", "localhost:6379", nil, []string{`"localhost:6379": no scheme`, "redis://host:port/db"}},
		{"no scheme with password", "u:" + password + "@localhost:6379", nil, []string{"invalid store URL: no scheme"}},
		{"no scheme, a path", "/var/lib/vmeta/vmeta.db", nil, []string{"no scheme", "bolt:///path/to/file.db"}},
		{"empty scheme", "://u:" + password + "@h", nil, []string{"no scheme"}},
		{"unknown scheme", "mysql://x", nil, []string{`unknown scheme "mysql"`, "bolt, redis"}},
		{"unknown scheme with password", "http://u:" + password + "@h:1", nil, []string{"unknown scheme", "http://…@h:1"}},
		{"bolt without a file", "bolt://", nil, []string{"no file", "bolt:///path/to/file.db"}},
		{"bolt with options", "bolt:///tmp/x.db?mode=ro", nil, []string{"no options"}},
		{"bolt with a fragment", "bolt:///tmp/x.db#f", nil, []string{"no options or fragment"}},
		{"bolt file in a file", "bolt://" + filepath.Join(dir, "x.db", "y.db"), nil, []string{"open store"}},
		{"redis cluster with a database", "redis+cluster://u:" + password + "@h1:1/2", nil, []string{"only database 0"}},
		{"redis sentinel without a master", "redis+sentinel://h1:1/0", nil, []string{"master name"}},
		{"redis bad port", "redis://u:" + password + "@localhost:notaport/0", nil, []string{"port"}},
		{"redis bad database", "redis://u:" + password + "@localhost/zero", nil, []string{"database"}},
		{"redis unreachable", "redis://u:" + password + "@" + unreachable + "/0", nil, []string{unreachable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "bolt file in a file" {
				// A regular file where a directory should be.
				st, err := bolt.Open(filepath.Join(dir, "x.db"))
				if err != nil {
					t.Fatal(err)
				}
				st.Close()
			}
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
			defer cancel()
			st, err := Open(ctx, tc.url, tc.opts...)
			storetest.OpenRefused(t, st, err, Redact(tc.url), password, tc.want)
		})
	}
}

// roundTrip writes a record through st and reads it back.
func roundTrip(t *testing.T, st store.Store) {
	t.Helper()
	if _, err := st.PutRecord(t.Context(), "storeurl/test", []byte("v"), -1); err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	rec, err := st.Record(t.Context(), "storeurl/test")
	if err != nil || string(rec.Value) != "v" {
		t.Fatalf("Record = %+v, %v", rec, err)
	}
}

func TestOpenBolt(t *testing.T) {
	dir := t.TempDir()
	for _, url := range []string{"", "bolt", "BOLT"} {
		st, err := Open(t.Context(), url, WithDataDir(dir))
		if err != nil {
			t.Fatalf("Open(%q): %v", url, err)
		}
		roundTrip(t, st)
		st.Close()
	}
	// The embedded store is the file bolt:// names.
	st, err := Open(t.Context(), "bolt://"+EmbeddedPath(dir))
	if err != nil {
		t.Fatalf("Open(bolt://…): %v", err)
	}
	defer st.Close()
	if _, ok := st.(*bolt.Store); !ok {
		t.Fatalf("Open(bolt://…) = %T, want *bolt.Store", st)
	}
	if _, err := st.Record(t.Context(), "storeurl/test"); err != nil {
		t.Fatalf("record written through the embedded form: %v", err)
	}
	// bolt allows one process (and one Open) per file: a second Open
	// waits FileLockTimeout and says the file is locked.
	_, err = Open(t.Context(), "BOLT://"+EmbeddedPath(dir))
	if !errors.Is(err, bolt.ErrLocked) {
		t.Fatalf("second Open of the file: %v, want ErrLocked", err)
	}
}

func TestOpenRedis(t *testing.T) {
	srv := testenv.StartRedisServer(t, "--requirepass", "the-password")
	for _, url := range []string{
		"redis://:the-password@" + srv.Addr() + "/3",
		"REDIS://default:the-password@" + srv.Addr() + "/3?dial_timeout=2s",
	} {
		st, err := Open(t.Context(), url)
		if err != nil {
			t.Fatalf("Open(%s): %v", Redact(url), err)
		}
		roundTrip(t, st)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
