package virt

import (
	"encoding/binary"
	"net"
	"sync/atomic"

	"github.com/digitalocean/go-libvirt/socket"
)

// rpcs counts the RPC packets every Conn of this process sent to libvirtd
// over a unix socket (RPCs).
var rpcs atomic.Int64

// RPCs returns how many RPC packets (calls, and the few stream packets
// such as an event subscription's) the Conns of this process have sent
// to libvirtd over its unix socket since the process started: what a step
// costs libvirtd, a figure the load of a shared machine does not move
// (issue 23 item 4: hostctl logs it per apply at debug level).
func RPCs() int64 { return rpcs.Load() }

// RPCs returns how many RPC packets c has sent to libvirtd (over a unix
// socket; every connection c made, reconnections included).
func (c *Conn) RPCs() int64 { return c.rpcs.Load() }

// countingDialer dials through its Dialer and counts the packets written
// to the connection in n and in the process's count.
type countingDialer struct {
	socket.Dialer
	n *atomic.Int64
}

func (d countingDialer) Dial() (net.Conn, error) {
	c, err := d.Dialer.Dial()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: d.n}, nil
}

// countingConn counts the packets of libvirt's RPC protocol written to
// it: each begins with its length (4 bytes, big endian, the length
// itself included), and a packet may be written in pieces or several in
// one Write.
type countingConn struct {
	net.Conn
	n *atomic.Int64 // the connection's count (the process's is rpcs)
	// Guarded by go-libvirt's socket, which writes one packet at a time
	// under its lock.
	head [4]byte
	nh   int    // bytes of head read
	left uint32 // bytes of the current packet's body still to come
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.count(b[:n])
	return n, err
}

func (c *countingConn) count(b []byte) {
	for len(b) > 0 {
		if c.left > 0 {
			k := min(uint32(len(b)), c.left)
			c.left -= k
			b = b[k:]
			continue
		}
		k := copy(c.head[c.nh:], b)
		c.nh += k
		b = b[k:]
		if c.nh < len(c.head) {
			return
		}
		c.nh = 0
		rpcs.Add(1)
		c.n.Add(1)
		if l := binary.BigEndian.Uint32(c.head[:]); l > 4 {
			c.left = l - 4
		}
	}
}
