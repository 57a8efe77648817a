package hosts_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/hosts"
)

// TestHostLease: the heartbeat record is the host name's lease. A second
// process beating for the same host is refused while the first is live,
// with a message naming it; it may take the name once the first stopped
// cleanly, went silent past DownAfter, or ran with the same data
// directory on the same machine (whose lock the second now holds).
func TestHostLease(t *testing.T) {
	const downAfter = time.Minute
	for _, tc := range []struct {
		name string
		// first is the holder's state after its beat.
		first func(ctx context.Context, b *hosts.Beater, clk *clock)
		// second describes the process that tries next.
		second  func(first *hosts.Holder) *hosts.Holder
		wantErr bool
	}{
		{"live holder", func(context.Context, *hosts.Beater, *clock) {}, func(*hosts.Holder) *hosts.Holder { return hosts.NewHolder(t.TempDir()) }, true},
		{"live holder, the second without a data directory", func(context.Context, *hosts.Beater, *clock) {}, func(*hosts.Holder) *hosts.Holder { return hosts.NewHolder("") }, true},
		{"stopped", func(ctx context.Context, b *hosts.Beater, _ *clock) {
			if err := b.Stop(ctx); err != nil {
				t.Fatal(err)
			}
		}, func(*hosts.Holder) *hosts.Holder { return hosts.NewHolder(t.TempDir()) }, false},
		{"silent past down-after", func(_ context.Context, _ *hosts.Beater, clk *clock) { clk.advance(downAfter + time.Second) },
			func(*hosts.Holder) *hosts.Holder { return hosts.NewHolder(t.TempDir()) }, false},
		{"silent, not yet down", func(_ context.Context, _ *hosts.Beater, clk *clock) { clk.advance(downAfter - time.Second) },
			func(*hosts.Holder) *hosts.Holder { return hosts.NewHolder(t.TempDir()) }, true},
		{"same machine and data directory (restart after a crash)", func(context.Context, *hosts.Beater, *clock) {},
			func(first *hosts.Holder) *hosts.Holder { return hosts.NewHolder(first.DataDir) }, false},
		{"same data directory path on another machine", func(context.Context, *hosts.Beater, *clock) {},
			func(first *hosts.Holder) *hosts.Holder {
				h := hosts.NewHolder(first.DataDir)
				h.Machine += "-other"
				return h
			}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := openBolt(t)
			clk := &clock{t: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
			h1 := hosts.NewHolder(t.TempDir())
			b1 := &hosts.Beater{Store: st, Host: "host-a", Version: "v1", Now: clk.now, Holder: h1, DownAfter: downAfter}
			if err := b1.Beat(ctx); err != nil {
				t.Fatal(err)
			}
			tc.first(ctx, b1, clk)
			h2 := tc.second(h1)
			b2 := &hosts.Beater{Store: st, Host: "host-a", Version: "v1", Now: clk.now, Holder: h2, DownAfter: downAfter}
			err := b2.Beat(ctx)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("second beat = %v, want the name taken over", err)
				}
				// The first holder's next beat is refused now (unless it
				// shares the data directory: then it cannot be running).
				if err := b1.Beat(ctx); h2.DataDir != h1.DataDir && !errors.Is(err, hosts.ErrHostHeld) {
					t.Errorf("the first holder's beat after the takeover = %v, want ErrHostHeld", err)
				}
				return
			}
			if !errors.Is(err, hosts.ErrHostHeld) || !strings.Contains(err.Error(), h1.String()) {
				t.Fatalf("second beat = %v; want ErrHostHeld naming %s", err, h1)
			}
			// The holder keeps beating.
			if err := b1.Beat(ctx); err != nil {
				t.Fatalf("the holder's beat: %v", err)
			}
		})
	}
}
