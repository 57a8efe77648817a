package keys_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store/redis"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestRotateKEKRedisOutage: Redis goes away in the middle of a KEK
// rotation (killed after the second batch); the rotation fails with an
// error that says what it was doing (and holds no secret), keeps every
// generation, and the next call, once Redis is back with its data (an
// append-only file fsynced on every write), finishes the rotation.
func TestRotateKEKRedisOutage(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedisServer(t, "--appendonly", "yes", "--appendfsync", "always")
	st, err := redis.Open(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	dir := t.TempDir()
	m := openManager(t, st, dir, keys.Options{Host: "h1", RotateBatch: 16})
	s := seed(t, m, 100)

	stopped := false
	_, err = m.RotateKEK(ctx, 2, func(done, total int) {
		if done >= 32 && !stopped {
			stopped = true
			srv.Stop()
		}
	})
	if !stopped {
		t.Fatal("the rotation never reached its third batch")
	}
	if err == nil {
		t.Fatal("RotateKEK succeeded with Redis down")
	}
	msg := err.Error()
	t.Logf("the rotation during the outage: %v", err)
	if !strings.Contains(msg, "rotate key-encryption key") {
		t.Errorf("error %q does not say it was rotating the key-encryption key", msg)
	}
	for id, p := range s.pass {
		if strings.Contains(msg, string(p)) {
			t.Fatalf("the error holds secret %s's passphrase", id)
		}
	}
	if k := m.KEK(); k.Current != 2 || !slices.Equal(k.Generations, []int64{1, 2}) {
		t.Fatalf("after the failed rotation: %+v; want current 2 with 1 kept", k)
	}

	srv.Start()
	res, err := m.RotateKEK(ctx, 2, nil)
	if err != nil {
		t.Fatalf("RotateKEK after Redis returned: %v", err)
	}
	if res.NewKey || res.Generation != 2 || res.Rewrapped < 100-32 || !slices.Equal(res.Retired, []int64{1}) {
		t.Fatalf("RotateKEK after Redis returned = %+v; want the rest rewrapped with the same key, 1 retired", res)
	}
	if bad := s.verify(ctx, m, 2); len(bad) > 0 {
		t.Fatalf("after the outage: %v", bad)
	}
}
