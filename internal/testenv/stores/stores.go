// Package stores opens the real store backends for tests above
// internal/store: an embedded bolt file in a temporary directory and a
// private redis-server (through testenv, so its skip policy holds). Each
// store is closed when the test ends.
//
// It is apart from testenv because it imports the backends, whose own
// tests import testenv. Only _test.go files should import this package.
package stores

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/store/redis"
	"github.com/vmeta/vmeta/internal/testenv"
)

// File is the name of the store file BoltIn opens in its directory (the
// daemon's, in its data directory).
const File = "vmeta.db"

// Bolt opens a bolt store in a new temporary directory.
func Bolt(t testing.TB) *bolt.Store {
	t.Helper()
	return BoltIn(t, t.TempDir())
}

// BoltIn opens the bolt store File in dir (a data directory the test
// also uses for other files).
func BoltIn(t testing.TB, dir string) *bolt.Store {
	t.Helper()
	return BoltAt(t, filepath.Join(dir, File))
}

// BoltAt opens the bolt store file at path.
func BoltAt(t testing.TB, path string) *bolt.Store {
	t.Helper()
	st, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Redis starts a private redis-server and opens a store on it.
func Redis(t testing.TB) *redis.Store {
	t.Helper()
	return RedisAt(t, testenv.StartRedis(t))
}

// RedisAt opens a redis store at url.
func RedisAt(t testing.TB, url string) *redis.Store {
	t.Helper()
	st, err := redis.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Both opens the two real backends, by name: "bolt" (Bolt) and "redis"
// (Redis), for a test that must hold on each.
func Both(t testing.TB) map[string]store.Store {
	t.Helper()
	return map[string]store.Store{"bolt": Bolt(t), "redis": Redis(t)}
}
