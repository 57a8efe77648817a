package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
	"unsafe"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// TestLimitedConnLayout: what every request reads of its connection —
// the connection, the deadlines and the memo — fits the first cache line
// of the connection's allocation, whose size class starts it on a line
// (a size of at most 128 bytes).
func TestLimitedConnLayout(t *testing.T) {
	var c limitedConn
	if end := unsafe.Offsetof(c.ctx) + unsafe.Offsetof(c.ctx.memo) + unsafe.Sizeof(c.ctx.memo); end > 64 {
		t.Errorf("limitedConn's memo ends at byte %d; want it within the first 64", end)
	}
	if n := unsafe.Sizeof(c); n > 128 {
		t.Errorf("limitedConn is %d bytes; want at most 128 (a size class aligned to cache lines)", n)
	}
}

// keepAlive is one HTTP/1.1 connection from a guest's address, on which
// each get sends a request and reads its answer.
type keepAlive struct {
	c  net.Conn
	br *bufio.Reader
}

func (k *keepAlive) get(t *testing.T, path string) (int, string) {
	t.Helper()
	if _, err := fmt.Fprintf(k.c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	k.c.SetReadDeadline(time.Now().Add(10 * time.Second)) // bounds a broken test only
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		t.Fatalf("GET %s on the kept connection: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Close {
		t.Fatalf("GET %s: the server closed the connection", path)
	}
	return resp.StatusCode, string(body)
}

// serveReal runs s's guest-facing http.Server (HTTPServer on Listener) on
// a loopback port and returns its address.
func serveReal(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := s.HTTPServer()
	go srv.Serve(s.Listener(ln))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestConnMemoFollowsChanges: a guest's connection remembers the view
// its requests found, and every change that makes it stale is seen by
// the next request on the same connection: a republish, the guest's
// address moving to another instance, the instance deleted.
func TestConnMemoFollowsChanges(t *testing.T) {
	docs := newFakeDocs()
	web := richInstance(t) // 127.0.0.1 among its addresses
	docs.publish(t, web)
	o := testOptions(time.Now)
	o.SweepInterval = -1 // the feed and Invalidate alone
	s := New(docs, o)
	runServer(t, s)
	eventually(t, "subscription", func() bool { return docs.subscribers() == 1 })
	k := &keepAlive{c: dialFrom(t, "127.0.0.1", serveReal(t, s))}
	k.br = bufio.NewReader(k.c)
	hostname := func() string {
		t.Helper()
		code, body := k.get(t, "/latest/meta-data/hostname")
		if code != http.StatusOK {
			return fmt.Sprint(code)
		}
		return body
	}
	if h := hostname(); h != "web-1.novalocal" {
		t.Fatalf("first request: %q", h)
	}

	// Remembered: the next request reads neither the cache's index nor
	// its lock (held here; a request taking it would never answer).
	s.cache.mu.Lock()
	done := make(chan string)
	go func() { _, body := k.get(t, "/openstack/latest/meta_data.json"); done <- body }()
	select {
	case body := <-done:
		if len(body) == 0 {
			t.Error("empty meta_data.json from the remembered view")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a request on a remembered connection waited for the cache's lock")
	}
	s.cache.mu.Unlock()

	// Republished: hostctl invalidates in-process.
	web.Hostname = "web-1b"
	docs.publish(t, web)
	s.Invalidate(web.UUID)
	if h := hostname(); h != "web-1b.novalocal" {
		t.Errorf("after a republish: %q on the same connection", h)
	}

	// The address moves to another instance (published elsewhere: only
	// the feed tells).
	web.Addresses = []string{"10.0.0.5"}
	docs.publish(t, web)
	db := &model.Instance{Name: "db-1", UUID: otherUUID, Hostname: "db-1", ProjectID: "other", Addresses: []string{"127.0.0.1"}}
	docs.publish(t, db)
	docs.send(store.Change{UUID: db.UUID, Version: docs.version(db.UUID), Addresses: db.Addresses})
	eventually(t, "the move to be seen", func() bool { return hostname() == "db-1.novalocal" })

	// Deleted.
	docs.mu.Lock()
	delete(docs.docs, db.UUID)
	delete(docs.addrs, "127.0.0.1")
	docs.mu.Unlock()
	s.Invalidate(db.UUID)
	if h := hostname(); h != "404" {
		t.Errorf("after the instance was deleted: %q; want 404", h)
	}
}

// TestConnMemoTokenRequired: a view whose policy requires a token is not
// remembered, so each request on the connection is checked for one.
func TestConnMemoTokenRequired(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	o := testOptions(time.Now)
	o.TokenPolicy = TokenRequired
	s := New(docs, o)
	k := &keepAlive{c: dialFrom(t, "127.0.0.1", serveReal(t, s))}
	k.br = bufio.NewReader(k.c)
	for i := range 3 {
		if code, _ := k.get(t, "/latest/meta-data/hostname"); code != http.StatusUnauthorized {
			t.Errorf("request %d without a token: %d; want 401", i+1, code)
		}
	}
}

// TestViewLayout: what every request reads of a view (uuid, policy,
// bucket, hot) is within its first 64 bytes, and a view's size is that of
// a size class whose objects start on a cache line (a multiple of 64).
func TestViewLayout(t *testing.T) {
	var v view
	if end := unsafe.Offsetof(v.hot) + unsafe.Sizeof(v.hot); end > 64 {
		t.Errorf("view's hot fields end at byte %d; want within the first 64", end)
	}
	if n := unsafe.Sizeof(v); n%64 != 0 {
		t.Errorf("view is %d bytes; want a multiple of 64 (pad it)", n)
	}
}
