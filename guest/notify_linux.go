//go:build linux

package guest

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Notify sends a message to systemd's notification socket
// ($NOTIFY_SOCKET, "@name" for an abstract one), as sd_notify(3) does;
// without the variable it does nothing. It sends one datagram with
// sendto(2), as libsystemd does: READY=1 ends the time the agent's unit
// holds the boot, and net's dialer costs a first use of its code under
// emulation.
func Notify(state string) error {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return nil
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sd_notify: socket: %w", err)
	}
	defer unix.Close(fd)
	// x/sys/unix makes a name starting with '@' abstract (a leading NUL).
	if err := unix.Sendto(fd, []byte(state), unix.MSG_NOSIGNAL, &unix.SockaddrUnix{Name: sock}); err != nil {
		return fmt.Errorf("sd_notify %s: %w", sock, err)
	}
	return nil
}
