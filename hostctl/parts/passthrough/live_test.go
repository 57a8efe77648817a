package passthrough

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
)

// liveInventory is fakeInventory that knows which devices are flagged
// live_migratable.
type liveInventory struct {
	fakeInventory
	live map[string]bool
}

func (l *liveInventory) LiveMigratable(_ context.Context, addr string) (bool, error) {
	ok, known := l.live[addr]
	if !known {
		return false, errors.New("no device " + addr + " in the inventory")
	}
	return ok, nil
}

// TestLiveMigrationNeedsLiveMigratableDevices: the one-time-use
// specification allows a live migration only of devices already live
// migratable; every other operation's check is unchanged.
func TestLiveMigrationNeedsLiveMigratableDevices(t *testing.T) {
	ctx := context.Background()
	inv := &liveInventory{live: map[string]bool{"0000:00:01.0": true, "0000:00:02.0": false}}
	for _, c := range []struct {
		name string
		inv  Inventory
		devs []string
		want string // "" allowed
	}{
		{"no device", inv, nil, ""},
		{"live migratable", inv, []string{"0000:00:01.0"}, ""},
		{"not live migratable", inv, []string{"0000:00:01.0", "0000:00:02.0"}, "0000:00:02.0 is not live_migratable"},
		{"unknown to the inventory", inv, []string{"0000:00:03.0"}, "no device 0000:00:03.0"},
		{"an inventory that cannot tell", &fakeInventory{}, []string{"0000:00:01.0"}, "no device inventory to say it is live_migratable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := New(c.inv)
			in := &model.Instance{Name: "vm1", UUID: "u1"}
			for _, a := range c.devs {
				in.PCIDevices = append(in.PCIDevices, model.PCIDevice{Address: a, OneTimeUse: true})
			}
			err := p.Check(ctx, part.MigrateLive, &part.Instance{Spec: in})
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, part.ErrState)):
				t.Fatalf("got %v, want a state refusal naming %q", err, c.want)
			}
			if err := p.Check(ctx, part.MigrateCold, &part.Instance{Spec: in}); err != nil {
				t.Fatalf("a cold move is refused too: %v", err)
			}
		})
	}
}
