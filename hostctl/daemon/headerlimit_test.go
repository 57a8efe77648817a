package daemon_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/daemon"
)

// TestAdminHeaderLimit: a request line of 1 MB on the admin socket is
// refused by the server (431) before any handler or log line sees it; a
// request of ordinary size is served.
func TestAdminHeaderLimit(t *testing.T) {
	cfg := serveConfig(t, t.TempDir())
	b := daemon.RunInBackground(cfg)
	b.StopAtEnd(t)
	stderr := b.Stderr
	c := client.NewUnix(cfg.Socket)
	b.WaitFor(t, 30*time.Second, "answer on the admin socket", func() error {
		_, err := c.List(context.Background())
		return err
	})

	status := func(path string) int {
		t.Helper()
		conn, err := net.Dial("unix", cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		go func() {
			// The server may answer and close before the whole line is
			// written; the write error is of no interest.
			_, _ = conn.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: hostctl\r\n\r\n"))
		}()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("GET %.40s…: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("/v1/instances"); got != http.StatusOK {
		t.Errorf("GET /v1/instances: %d, want 200", got)
	}
	long := "/v1/instances/" + strings.Repeat("a", 1<<20)
	if got := status(long); got != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("GET of a 1 MB path: %d, want 431", got)
	}
	if strings.Contains(stderr.String(), strings.Repeat("a", 1024)) {
		t.Errorf("the 1 MB path reached the log")
	}
}
