//go:build !linux

package guest

import (
	"errors"
	"net"
	"os"
	"strings"
)

// Notify sends a message to systemd's notification socket
// ($NOTIFY_SOCKET), as sd_notify(3) does; without the variable it does
// nothing.
func Notify(state string) error {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return nil
	}
	if strings.HasPrefix(sock, "@") {
		sock = "\x00" + sock[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return errors.Join(errors.New("sd_notify"), err)
	}
	return nil
}
