package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	hostmetrics "github.com/vmeta/vmeta/hostctl/metrics"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestPartMetricSources: the sources hostctl serve gives its metrics
// read the parts' real state: a one-time-use device claimed and released
// awaits cleaning since its release (and no longer once cleaned), the
// share mappings are counted (none here), and every key class is
// reported, with a failed rotation counted.
func TestPartMetricSources(t *testing.T) {
	ctx := t.Context()
	st := stores.Bolt(t)
	spec, err := devices.ParseSpec([]byte("devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n    one_time_use: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := devices.New(st, devices.Options{Host: "h1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Sync(ctx, []devices.Found{{Address: "0000:3b:00.0", VendorID: "10de", ProductID: "20b5", Class: "030200"}}); err != nil {
		t.Fatal(err)
	}
	e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.0.0"})
	e.Register(keyrotation.KEK, failingRotator{})
	src := partMetricSources(hostmetrics.Sources{}, "h1", inv, st, e)
	if src.Host != "h1" || src.AwaitingCleaning == nil || src.ShareMappings == nil || src.KeyRotations == nil {
		t.Fatalf("sources %+v", src)
	}

	awaiting := func() []time.Time {
		t.Helper()
		since, err := src.AwaitingCleaning(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return since
	}
	if got := awaiting(); len(got) != 0 {
		t.Fatalf("awaiting cleaning before any use: %v", got)
	}
	if _, _, err := inv.Claim(ctx, devices.Consumer{UUID: "u-1", Name: "one"}, []model.PCIAlias{{Name: "gpu", Count: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := awaiting(); len(got) != 0 {
		t.Fatalf("awaiting cleaning while in use: %v", got)
	}
	released, err := inv.Release(ctx, "u-1", nil)
	if err != nil || len(released) != 1 || released[0].ReleasedAt == nil {
		t.Fatalf("release: %+v, %v", released, err)
	}
	if got := awaiting(); len(got) != 1 || !got[0].Equal(*released[0].ReleasedAt) {
		t.Fatalf("awaiting cleaning after release: %v, want since %v", got, released[0].ReleasedAt)
	}
	if _, err := inv.Clean(ctx, "0000:3b:00.0"); err != nil {
		t.Fatal(err)
	}
	if got := awaiting(); len(got) != 0 {
		t.Fatalf("awaiting cleaning once cleaned: %v", got)
	}

	if m, err := src.ShareMappings(ctx); err != nil || len(m) != 0 {
		t.Fatalf("share mappings: %v, %v", m, err)
	}

	if _, err := e.Rotate(ctx, keyrotation.Subject{Class: keyrotation.KEK}); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(ctx); err == nil {
		t.Fatal("run with a failing rotator: no error")
	}
	rs, err := src.KeyRotations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(keyrotation.Classes) {
		t.Fatalf("key rotations %+v, want every class", rs)
	}
	for _, r := range rs {
		want := hostmetrics.KeyRotations{Class: r.Class}
		if r.Class == string(keyrotation.KEK) {
			want.Failed = 1
		}
		if r != want {
			t.Errorf("%+v, want %+v", r, want)
		}
	}
}

type failingRotator struct{}

func (failingRotator) Rotate(context.Context, keyrotation.Subject, int64, int, func(keyrotation.Progress)) (keyrotation.Result, error) {
	return keyrotation.Result{}, errors.New("induced")
}
