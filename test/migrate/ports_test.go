package migrate_test

import (
	"net"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// TestHostStartPortTaken: a host whose channel port was taken between
// picking it and the daemon binding it (the tests here start hosts in
// parallel) starts on another port, not failing the test.
func TestHostStartPortTaken(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	redis := testenv.StartRedis(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := newHostAt(t, "p", uri, redis, l.Addr().String())
	if h.migAddr == l.Addr().String() {
		t.Fatalf("the host kept the taken port %s", h.migAddr)
	}
	h.must("instance", "list")
}
