package ops

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/virt"
)

// TestResolveAffect: the request's --live/--config choice becomes
// libvirt's flags for a domain that runs or not, and a choice the
// domain's state does not allow is refused (ErrState) saying why.
func TestResolveAffect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a       types.Affect
		running bool
		want    virt.Affect
		refused string
	}{
		{name: "no flag, shut off", want: virt.AffectConfig},
		{name: "no flag, running", running: true, want: virt.AffectLive | virt.AffectConfig},
		{name: "config, shut off", a: types.Affect{Config: true}, want: virt.AffectConfig},
		{name: "live, running", a: types.Affect{Live: true}, running: true, want: virt.AffectLive},
		{name: "live and config, running", a: types.Affect{Live: true, Config: true}, running: true, want: virt.AffectLive | virt.AffectConfig},
		{name: "live, shut off", a: types.Affect{Live: true}, refused: "--live needs a running domain"},
		{name: "config alone, running", a: types.Affect{Config: true}, running: true, refused: "--config alone on a running domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveAffect(tc.a, tc.running)
			if tc.refused != "" {
				if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("resolveAffect(%+v, running=%t) = %v, %v; want ErrState saying %q", tc.a, tc.running, got, err, tc.refused)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("resolveAffect(%+v, running=%t) = %v, %v; want %v", tc.a, tc.running, got, err, tc.want)
			}
		})
	}
}

// xmlSeq is the core as waitRemoved reads it: the running domain's XML,
// one document per read (the last one again when they run out), or an
// error; the detach timeout.
type xmlSeq struct {
	DeviceChanges // only RunningXML and DetachTimeout are called
	docs          []string
	err           error
	timeout       time.Duration
	reads         int
}

func (x *xmlSeq) RunningXML(context.Context, string) ([]byte, error) {
	x.reads++
	if x.err != nil {
		return nil, x.err
	}
	return []byte(x.docs[min(x.reads, len(x.docs))-1]), nil
}
func (x *xmlSeq) DetachTimeout() time.Duration { return x.timeout }

// TestWaitRemoved: after a live detach the running domain is read until
// the device is gone from it; a guest that keeps it past the detach
// timeout, or a domain that cannot be read, is a warning naming the
// device; a detach from the persistent configuration alone waits for
// nothing.
func TestWaitRemoved(t *testing.T) {
	const (
		with    = `<domain><devices><disk type='file' device='disk'><target dev='vdb' bus='virtio'/></disk></devices></domain>`
		without = `<domain><devices></devices></domain>`
	)
	hasVDB := func(d *virt.Devices, _ []byte) bool { _, ok := d.Disk("vdb"); return ok }
	live := virt.AffectLive | virt.AffectConfig
	for _, tc := range []struct {
		name      string
		x         xmlSeq
		affect    virt.Affect
		wantReads int
		wantWarn  string // the start of the one warning; "" for none
	}{
		{name: "config only", x: xmlSeq{docs: []string{with}}, affect: virt.AffectConfig},
		{name: "gone at once", x: xmlSeq{docs: []string{without}, timeout: time.Minute}, affect: live, wantReads: 1},
		{name: "gone at the second look", x: xmlSeq{docs: []string{with, without}, timeout: time.Minute}, affect: live, wantReads: 2},
		{name: "kept past the timeout", x: xmlSeq{docs: []string{with}, timeout: -time.Nanosecond}, affect: live, wantReads: 1,
			wantWarn: "disk vdb: the guest has not released it within"},
		{name: "domain unreadable", x: xmlSeq{err: errors.New("libvirtd gone"), timeout: time.Minute}, affect: live, wantReads: 1,
			wantWarn: "disk vdb: could not check the running domain after the detach: libvirtd gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := tc.x
			warn := waitRemoved(context.Background(), &x, slog.New(slog.DiscardHandler), "vm1", tc.affect, "disk vdb", hasVDB)
			if x.reads != tc.wantReads {
				t.Errorf("%d reads of the running domain, want %d", x.reads, tc.wantReads)
			}
			switch {
			case tc.wantWarn == "" && len(warn) != 0:
				t.Errorf("warnings %q, want none", warn)
			case tc.wantWarn != "" && (len(warn) != 1 || !strings.HasPrefix(warn[0], tc.wantWarn)):
				t.Errorf("warnings %q, want one saying %q", warn, tc.wantWarn)
			}
		})
	}
}
