package passthrough_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/passthrough"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestMoveBurnRules is the one-time-use specification's cold-migrate
// rules over two hosts' real inventories on one store: the destination
// claims (and burns) a new device for the move; a confirm releases the
// source's claim and its device stays burned; a revert releases the
// destination's and its device stays burned. The device list of every
// host (as `hostctl device list --all-hosts` prints it) is logged after
// each case.
func TestMoveBurnRules(t *testing.T) {
	for _, end := range []part.Op{part.ConfirmMigration, part.RevertMigration} {
		t.Run(string(end), func(t *testing.T) {
			ctx := context.Background()
			st := stores.Bolt(t)
			spec, err := devices.ParseSpec([]byte(`[{"vendor_id":"10de","alias":"gpu","one_time_use":true}]`))
			if err != nil {
				t.Fatal(err)
			}
			invs := map[string]*devices.Inventory{}
			for _, h := range []string{"a", "b"} {
				inv, err := devices.New(st, devices.Options{Host: h, Spec: spec})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := inv.Sync(ctx, []devices.Found{{Address: "0000:3b:00.0", VendorID: "10de", ProductID: "20b5", Class: "030200"}}); err != nil {
					t.Fatal(err)
				}
				invs[h] = inv
			}
			pa, pb := passthrough.New(invs["a"]), passthrough.New(invs["b"])
			in := &model.Instance{Name: "vm", UUID: "11111111-2222-4333-8444-555555555555", PCIAliases: []model.PCIAlias{{Name: "gpu", Count: 1, Tag: "ml"}}}
			claim := func(p *passthrough.Part, op part.Op) {
				t.Helper()
				done, err := p.Claim(ctx, op, &part.Instance{Spec: in})
				if err != nil {
					t.Fatal(err)
				}
				done(ctx, nil)
			}
			claim(pa, part.Apply)
			claim(pb, part.MigrateCold) // the destination's apply for the move
			moved := pa
			if end == part.RevertMigration {
				moved = pb
			}
			if err := moved.Moved(ctx, end, &part.Instance{Spec: in}); err != nil {
				t.Fatal(err)
			}
			if err := moved.Moved(ctx, end, &part.Instance{Spec: in}); err != nil { // a retried confirm or revert
				t.Fatal(err)
			}
			list, err := invs["a"].ListDevices(ctx, false, "", true)
			if err != nil {
				t.Fatal(err)
			}
			var rows []string
			for _, d := range list {
				rows = append(rows, fmt.Sprintf("%s %s reserved=%d used=%d consumer=%s", d.Host, d.Address, d.Reserved, d.Used, d.Consumer))
			}
			t.Logf("device list --all-hosts after %s:\n%s", end, strings.Join(rows, "\n"))
			want := map[string]string{ // host -> used, both burned
				"a": "reserved=1 used=0", "b": "reserved=1 used=1"}
			if end == part.RevertMigration {
				want = map[string]string{"a": "reserved=1 used=1", "b": "reserved=1 used=0"}
			}
			if len(list) != 2 {
				t.Fatalf("%d devices, want one per host", len(list))
			}
			for _, d := range list {
				if got := fmt.Sprintf("reserved=%d used=%d", d.Reserved, d.Used); got != want[d.Host] {
					t.Errorf("host %s after %s: %s, want %s", d.Host, end, got, want[d.Host])
				}
			}
		})
	}
}
