//go:build linux

package altname

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

var seq atomic.Uint32

// Get returns interface index's names.
func Get(index int) (Link, error) {
	msgs, err := request(unix.RTM_GETLINK, unix.NLM_F_REQUEST, index, nil)
	if err != nil {
		return Link{}, fmt.Errorf("get link %d: %w", index, err)
	}
	for _, m := range msgs {
		if m.typ != unix.RTM_NEWLINK || len(m.data) < unix.SizeofIfInfomsg {
			continue
		}
		l := Link{Index: int(int32(binary.NativeEndian.Uint32(m.data[4:8])))}
		for _, a := range attrs(m.data[unix.SizeofIfInfomsg:]) {
			switch a.typ &^ unix.NLA_F_NESTED {
			case unix.IFLA_IFNAME:
				l.Name = cstring(a.data)
			case unix.IFLA_PROP_LIST:
				for _, p := range attrs(a.data) {
					if p.typ == unix.IFLA_ALT_IFNAME {
						l.AltNames = append(l.AltNames, cstring(p.data))
					}
				}
			}
		}
		return l, nil
	}
	return Link{}, fmt.Errorf("get link %d: no answer", index)
}

// Add gives interface index the alternative name name. A name another
// interface has (as its name or alternative name) fails with EEXIST.
func Add(index int, name string) error {
	_, err := request(unix.RTM_NEWLINKPROP, unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_EXCL|unix.NLM_F_CREATE|unix.NLM_F_APPEND, index, propList(name))
	if err != nil {
		return fmt.Errorf("add altname %q to link %d: %w", name, index, err)
	}
	return nil
}

// Del removes the alternative name name from interface index.
func Del(index int, name string) error {
	_, err := request(unix.RTM_DELLINKPROP, unix.NLM_F_REQUEST|unix.NLM_F_ACK, index, propList(name))
	if err != nil {
		return fmt.Errorf("remove altname %q from link %d: %w", name, index, err)
	}
	return nil
}

func propList(name string) []byte {
	inner := attr(unix.IFLA_ALT_IFNAME, append([]byte(name), 0))
	return attr(unix.IFLA_PROP_LIST|unix.NLA_F_NESTED, inner)
}

func attr(typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	b := make([]byte, align(l))
	binary.NativeEndian.PutUint16(b[0:2], uint16(l))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	copy(b[4:], data)
	return b
}

func align(n int) int { return (n + 3) &^ 3 }

type rtattr struct {
	typ  uint16
	data []byte
}

// attrs parses a run of netlink attributes, stopping at a malformed one.
func attrs(b []byte) []rtattr {
	var out []rtattr
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < unix.SizeofRtAttr || l > len(b) {
			break
		}
		out = append(out, rtattr{typ: binary.NativeEndian.Uint16(b[2:4]), data: b[4:l]})
		if align(l) >= len(b) {
			break
		}
		b = b[align(l):]
	}
	return out
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

type message struct {
	typ  uint16
	data []byte
}

// request sends one rtnetlink request about interface index and returns
// the answers (for a request with NLM_F_ACK, after a zero error).
func request(typ uint16, flags uint16, index int, payload []byte) ([]message, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Sec: 5}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	s := seq.Add(1)
	body := make([]byte, unix.SizeofIfInfomsg)
	body[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(body[4:8], uint32(int32(index)))
	body = append(body, payload...)
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:4], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:6], typ)
	binary.NativeEndian.PutUint16(msg[6:8], flags)
	binary.NativeEndian.PutUint32(msg[8:12], s)
	msg = append(msg, body...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("sendto", err)
	}
	var out []message
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, os.NewSyscallError("recvfrom", err)
		}
		b := buf[:n]
		for len(b) >= unix.SizeofNlMsghdr {
			l := int(binary.NativeEndian.Uint32(b[0:4]))
			mt := binary.NativeEndian.Uint16(b[4:6])
			ms := binary.NativeEndian.Uint32(b[8:12])
			if l < unix.SizeofNlMsghdr || l > len(b) {
				return nil, errors.New("malformed netlink answer")
			}
			data := b[unix.SizeofNlMsghdr:l]
			if ms == s {
				switch mt {
				case unix.NLMSG_ERROR:
					if len(data) < 4 {
						return nil, errors.New("malformed netlink error")
					}
					if code := int32(binary.NativeEndian.Uint32(data[0:4])); code != 0 {
						errno := unix.Errno(-code)
						if errno == unix.EOPNOTSUPP && (typ == unix.RTM_NEWLINKPROP || typ == unix.RTM_DELLINKPROP) {
							return nil, ErrUnsupported
						}
						return nil, errno
					}
					return out, nil
				case unix.NLMSG_DONE:
					return out, nil
				default:
					out = append(out, message{typ: mt, data: append([]byte(nil), data...)})
					if flags&unix.NLM_F_ACK == 0 && flags&unix.NLM_F_DUMP == 0 {
						return out, nil
					}
				}
			}
			if align(l) >= len(b) {
				break
			}
			b = b[align(l):]
		}
	}
}
