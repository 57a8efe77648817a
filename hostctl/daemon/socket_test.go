package daemon

import (
	"os"
	"syscall"
	"testing"
)

// TestAdminPeerAllowed: root, the daemon's own user and the socket group
// (by the peer's primary group) are served; anyone else is not, and with
// no socket group a group match counts for nothing.
func TestAdminPeerAllowed(t *testing.T) {
	self := uint32(os.Geteuid())
	other := uint32(65534)
	if self == other {
		other = 65533
	}
	for _, tc := range []struct {
		name string
		gid  int
		peer syscall.Ucred
		want bool
	}{
		{"root", -1, syscall.Ucred{Uid: 0, Gid: 0}, true},
		{"the daemon's user", -1, syscall.Ucred{Uid: self, Gid: 4242}, true},
		{"another user", -1, syscall.Ucred{Uid: other, Gid: 4242}, false},
		{"another user in the socket group", 4242, syscall.Ucred{Uid: other, Gid: 4242}, true},
		{"another user outside the socket group", 4242, syscall.Ucred{Uid: other, Gid: 4243}, false},
	} {
		l := &peerListener{gid: tc.gid}
		if got := l.allowed(&tc.peer); got != tc.want {
			t.Errorf("%s: allowed = %v, want %v", tc.name, got, tc.want)
		}
	}
}
