package uevent_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/vmeta/vmeta/guest/uevent"
	"github.com/vmeta/vmeta/internal/testenv"
)

func raw(s ...string) []byte {
	var b []byte
	for _, x := range s {
		b = append(b, x...)
		b = append(b, 0)
	}
	return b
}

func TestParse(t *testing.T) {
	e, err := uevent.Parse(raw("add@/devices/pci0000:00/0000:00:0a.0/virtio7/block/vdd", "ACTION=add", "DEVPATH=/devices/pci0000:00/0000:00:0a.0/virtio7/block/vdd", "SUBSYSTEM=block", "DEVNAME=vdd", "DEVTYPE=disk", "SEQNUM=1234"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Action != "add" || e.Subsystem != "block" || e.DevPath != "/devices/pci0000:00/0000:00:0a.0/virtio7/block/vdd" || !uevent.Relevant(e) || uevent.MediaChange(e) {
		t.Errorf("%+v", e)
	}
	mc, err := uevent.Parse(raw("change@/devices/pci0000:00/0000:00:1f.2/ata3/host2/target2:0:0/2:0:0:0/block/sr0", "ACTION=change", "SUBSYSTEM=block", "DISK_MEDIA_CHANGE=1", "DEVNAME=sr0"))
	if uevent.MediaChange(uevent.Event{Action: "change", Subsystem: "block", Env: map[string]string{"DISK_EJECT_REQUEST": "1"}}) {
		t.Error("an eject request counts as a media change")
	}
	if err != nil || !uevent.MediaChange(mc) || !uevent.Relevant(mc) {
		t.Errorf("media change: %+v %v", mc, err)
	}
	fs, err := uevent.Parse(raw("add@/fs/virtiofs/6", "ACTION=add", "DEVPATH=/fs/virtiofs/6", "SUBSYSTEM=virtiofs", "TAG=share2"))
	if err != nil || !uevent.Relevant(fs) {
		t.Errorf("virtiofs: %+v %v", fs, err)
	}
	for _, b := range [][]byte{nil, raw("nonsense"), raw("frob@/devices/x"), raw("add@/x", "NOEQUALS")} {
		if _, err := uevent.Parse(b); err == nil {
			t.Errorf("Parse(%q) accepted", b)
		}
	}
}

func TestRelevant(t *testing.T) {
	for _, c := range []struct {
		e    uevent.Event
		want bool
	}{
		{uevent.Event{Action: "add", Subsystem: "net"}, true},
		{uevent.Event{Action: "move", Subsystem: "net"}, true},
		{uevent.Event{Action: "change", Subsystem: "net"}, false},
		{uevent.Event{Action: "remove", Subsystem: "block"}, true},
		{uevent.Event{Action: "add", Subsystem: "virtio"}, true},
		{uevent.Event{Action: "add", Subsystem: "usb"}, false},
		{uevent.Event{Action: "bind", Subsystem: "pci"}, false},
		{uevent.Event{Action: uevent.Resync}, true},
	} {
		if got := uevent.Relevant(c.e); got != c.want {
			t.Errorf("Relevant(%+v) = %v", c.e, got)
		}
	}
}

// TestSynthetic: the kernel marks events written to a uevent file with
// SYNTH_UUID; a device's own events carry none.
func TestSynthetic(t *testing.T) {
	for _, c := range []struct {
		raw  []byte
		want bool
	}{
		{raw("add@/devices/pci0000:00/0000:00:04.0/virtio1/block/vdb", "ACTION=add", "DEVPATH=/devices/pci0000:00/0000:00:04.0/virtio1/block/vdb", "SUBSYSTEM=block", "SYNTH_UUID=0", "SEQNUM=2311"), true},
		{raw("change@/devices/virtual/net/lo", "ACTION=change", "DEVPATH=/devices/virtual/net/lo", "SUBSYSTEM=net", "SYNTH_UUID=5e3a1c52-0b55-4a4e-9b0f-2d7c3c1f2d11"), true},
		{raw("add@/devices/pci0000:00/0000:00:0a.0/virtio7/block/vdd", "ACTION=add", "DEVPATH=/devices/pci0000:00/0000:00:0a.0/virtio7/block/vdd", "SUBSYSTEM=block", "SEQNUM=2400"), false},
	} {
		e, err := uevent.Parse(c.raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := uevent.Synthetic(e); got != c.want {
			t.Errorf("Synthetic(%s %s %v) = %v, want %v", e.Action, e.DevPath, e.Env, got, c.want)
		}
	}
}

// FuzzParse: the uevent parser never panics, and an event it accepts
// has a known action.
func FuzzParse(f *testing.F) {
	f.Add(raw("add@/devices/x", "ACTION=add", "SUBSYSTEM=block"))
	f.Add(raw("change@/x", "DISK_MEDIA_CHANGE=1"))
	f.Add([]byte("libudev\x00\xfe\xed\xca\xfe"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := uevent.Parse(b)
		if err != nil {
			return
		}
		switch e.Action {
		case "add", "remove", "change", "move", "online", "offline", "bind", "unbind":
		default:
			t.Fatalf("action %q", e.Action)
		}
		_ = uevent.Relevant(e)
	})
}

// TestMonitor receives a real kernel uevent: writing "change" to a
// device's uevent file makes the kernel announce it (lo, which exists in
// every network namespace and has no driver to disturb).
func TestMonitor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events := make(chan uevent.Event, 16)
	errc := make(chan error, 1)
	go func() { errc <- uevent.Monitor(ctx, events, func(err error) { t.Logf("monitor: %v", err) }) }()
	trigger := "/sys/class/net/lo/uevent"
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := os.WriteFile(trigger, []byte("change"), 0o200); err != nil {
			cancel()
			testenv.Require(t, "a writable sysfs", err.Error()+" (needs root)")
			return
		}
		select {
		case e := <-events:
			if e.DevPath == "/devices/virtual/net/lo" && e.Action == "change" && e.Subsystem == "net" {
				cancel()
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Errorf("Monitor returned %v after cancel", err)
				}
				return
			}
			t.Logf("other event: %+v", e)
		case err := <-errc:
			testenv.Require(t, "kernel uevents over netlink", err.Error())
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Fatal("no uevent for lo")
}
