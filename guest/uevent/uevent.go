// Package uevent follows the kernel's device events (uevents) over
// netlink with github.com/pilebones/go-udev in KernelEvent mode, which
// needs no udevd: block devices and NICs coming and going, media changes
// of a config drive cdrom, virtio devices (virtiofs) appearing. Socket
// failures (ENOBUFS in an event storm) end go-udev's monitor; Monitor then
// reconnects and emits a Resync event, since events may have been lost.
package uevent

import (
	"context"
	"errors"
	"time"

	"github.com/pilebones/go-udev/netlink"
)

// Actions beyond the kernel's (add, remove, change, move, bind, unbind,
// online, offline).
const (
	// Resync tells the consumer that events may have been missed and
	// everything should be looked at again.
	Resync = "resync"
)

// Event is one uevent.
type Event struct {
	Action    string
	DevPath   string
	Subsystem string
	Env       map[string]string
}

// Parse parses a raw kernel uevent ("add@/devices/...\0ACTION=add\0...").
func Parse(raw []byte) (Event, error) {
	u, err := netlink.ParseUEvent(raw)
	if err != nil {
		return Event{}, err
	}
	return convert(u), nil
}

func convert(u *netlink.UEvent) Event {
	return Event{Action: string(u.Action), DevPath: u.KObj, Subsystem: u.Env["SUBSYSTEM"], Env: u.Env}
}

// Relevant reports whether e may change what the agent applies: disks
// and partitions, NICs, virtio devices (a virtiofs device is one) and
// virtiofs instances (Linux 6.9 and later announce /fs/virtiofs/N with
// its TAG), and Resync.
func Relevant(e Event) bool {
	switch e.Subsystem {
	case "block":
		return e.Action == "add" || e.Action == "remove" || e.Action == "change" || e.Action == "move"
	case "net":
		return e.Action == "add" || e.Action == "remove" || e.Action == "move"
	case "virtio", "virtiofs":
		return e.Action == "add" || e.Action == "remove" || e.Action == "bind"
	}
	return e.Action == Resync
}

// MediaChange reports whether e says a removable disk's medium changed
// (a cdrom config drive swapped by the host). An eject request
// (DISK_EJECT_REQUEST) is not one: opening the drive then would lock its
// door and hold up the eject; the new medium brings a media change.
func MediaChange(e Event) bool {
	return e.Subsystem == "block" && e.Action == "change" && e.Env["DISK_MEDIA_CHANGE"] == "1"
}

// Synthetic reports whether e was asked for by writing to the device's
// uevent file (udev's coldplug, `udevadm trigger`) rather than sent by a
// device that came, went or changed: the kernel adds SYNTH_UUID to those
// (0 when the writer gave no UUID). At boot udev's coldplug sends an
// "add" for every device that is already there.
func Synthetic(e Event) bool {
	_, ok := e.Env["SYNTH_UUID"]
	return ok
}

// Monitor sends the kernel's uevents to out until ctx ends; onErr hears
// about dropped messages and reconnections. After a reconnection it sends
// a Resync event. It returns ctx's error, or the error of the first
// connection attempt (no netlink: not Linux, or not allowed).
func Monitor(ctx context.Context, out chan<- Event, onErr func(error)) error {
	first := true
	for {
		conn := &netlink.UEventConn{}
		if err := conn.Connect(netlink.KernelEvent); err != nil {
			if first {
				return err
			}
			onErr(err)
			if !sleep(ctx, time.Second) {
				return ctx.Err()
			}
			continue
		}
		if !first {
			select {
			case out <- Event{Action: Resync}:
			case <-ctx.Done():
			}
		}
		first = false
		err := follow(ctx, conn, out, onErr)
		conn.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		onErr(err)
		if !sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// follow forwards events of one connection until it fails or ctx ends.
func follow(ctx context.Context, conn *netlink.UEventConn, out chan<- Event, onErr func(error)) error {
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan netlink.UEvent, 256)
	errs := make(chan error, 16)
	go conn.MonitorWithContext(mctx, queue, errs, nil)
	var last error
	for {
		select {
		case u, ok := <-queue:
			if !ok {
				// The monitor ended: drain its last error.
				select {
				case err := <-errs:
					last = err
				default:
				}
				if last == nil {
					last = errors.New("uevent monitor stopped")
				}
				return last
			}
			select {
			case out <- convert(&u):
			case <-ctx.Done():
				return ctx.Err()
			}
		case err := <-errs:
			last = err
			if errors.Is(err, netlink.ErrUntrustedSender) || errors.Is(err, netlink.ErrTruncatedMessage) {
				onErr(err)
			}
		case <-ctx.Done():
			// The monitor notices within its read timeout and closes
			// the queue.
			for range queue {
			}
			return ctx.Err()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
