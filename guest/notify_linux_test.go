//go:build linux

package guest_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/guest"
)

// TestNotify: the message arrives as one datagram on the socket
// NOTIFY_SOCKET names, a path or an abstract name ("@..."); without the
// variable nothing is sent and nothing fails; a socket nobody listens on
// is an error naming it.
func TestNotify(t *testing.T) {
	abstract := fmt.Sprintf("@vmeta-notify-test-%d", os.Getpid())
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), abstract} {
		t.Run(name, func(t *testing.T) {
			addr := &net.UnixAddr{Name: name, Net: "unixgram"}
			if name[0] == '@' {
				addr.Name = "\x00" + name[1:]
			}
			l, err := net.ListenUnixgram("unixgram", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			t.Setenv("NOTIFY_SOCKET", name)
			if err := guest.Notify("READY=1"); err != nil {
				t.Fatalf("Notify: %v", err)
			}
			if err := l.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			n, err := l.Read(buf)
			if err != nil || string(buf[:n]) != "READY=1" {
				t.Fatalf("read %q, %v; want READY=1", buf[:n], err)
			}
		})
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := guest.Notify("READY=1"); err != nil {
		t.Errorf("Notify without NOTIFY_SOCKET: %v", err)
	}
	gone := filepath.Join(t.TempDir(), "nobody")
	t.Setenv("NOTIFY_SOCKET", gone)
	if err := guest.Notify("READY=1"); err == nil || !strings.Contains(err.Error(), gone) {
		t.Errorf("Notify to %s: %v, want an error naming it", gone, err)
	}
}
