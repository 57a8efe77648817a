package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
)

// listenAdmin listens on the admin socket at path, private from the first
// moment: the socket is bound inside a fresh 0700 directory next to path,
// given its mode (0600, or 0660 and the group of --socket-group) and only
// then renamed to path, so no umask and no race lets another user connect
// to it. Every accepted connection's peer is checked again (SO_PEERCRED):
// root, the daemon's own user and members of the socket group are served,
// anyone else is closed with a log line.
//
// A stale socket file left by a crashed daemon is replaced; the socket of
// a running one is not.
func listenAdmin(path, group string, gid int, log *slog.Logger) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if _, err := os.Stat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, staleSocketProbe); err == nil {
			c.Close()
			return nil, fmt.Errorf("admin socket %s: another hostctl daemon is listening", path)
		}
	}
	private, err := os.MkdirTemp(dir, ".hostctl-")
	if err != nil {
		return nil, fmt.Errorf("admin socket: private directory: %w", err)
	}
	defer os.RemoveAll(private)
	if err := os.Chmod(private, 0o700); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	tmp := filepath.Join(private, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // it is renamed; Close removes path
	mode := os.FileMode(0o600)
	if gid >= 0 {
		mode = 0o660
		if err := os.Chown(tmp, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("admin socket: --socket-group %s: %w", group, err)
		}
	}
	if err := os.Chmod(tmp, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	return &peerListener{UnixListener: ul, path: path, fi: fi, gid: gid, log: log}, nil
}

// peerListener serves only peers whose credentials (SO_PEERCRED) allow it.
type peerListener struct {
	*net.UnixListener
	path string
	fi   os.FileInfo
	gid  int
	log  *slog.Logger

	closeOnce sync.Once
}

// Accept returns the next connection of an allowed peer; the others are
// closed and logged.
func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cred, err := peerCred(c)
		if err == nil && l.allowed(cred) {
			return c, nil
		}
		args := []any{"err", err}
		if cred != nil {
			args = []any{"uid", cred.Uid, "gid", cred.Gid, "pid", cred.Pid}
		}
		l.log.Warn("admin socket: connection refused: the peer is neither root, this daemon's user, nor in --socket-group", args...)
		c.Close()
	}
}

// allowed: root, the daemon's own user, or a member of the socket group
// (primary or supplementary).
func (l *peerListener) allowed(c *syscall.Ucred) bool {
	if c.Uid == 0 || int(c.Uid) == os.Geteuid() {
		return true
	}
	if l.gid < 0 {
		return false
	}
	if int(c.Gid) == l.gid {
		return true
	}
	u, err := user.LookupId(strconv.Itoa(int(c.Uid)))
	if err != nil {
		return false
	}
	gids, err := u.GroupIds()
	return err == nil && slices.Contains(gids, strconv.Itoa(l.gid))
}

// Close stops listening and removes the socket file, if it is still this
// listener's.
func (l *peerListener) Close() error {
	err := l.UnixListener.Close()
	l.closeOnce.Do(func() {
		if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.fi) {
			_ = os.Remove(l.path)
		}
	})
	return err
}

// peerCred returns the credentials of a unix connection's peer.
func peerCred(c *net.UnixConn) (*syscall.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	if cred == nil {
		return nil, errors.New("SO_PEERCRED: no credentials")
	}
	return cred, nil
}
