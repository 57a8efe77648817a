package devices

import (
	"fmt"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

// BenchmarkOneTimeUseCycle is one tenant's turn with a one-time-use device
// from a pool of 20: claim (and burn), release, clean — three atomic group
// writes and their reads — on bolt (fsynced) and on a local Redis.
func BenchmarkOneTimeUseCycle(b *testing.B) {
	for _, bk := range []struct {
		name string
		open func(b *testing.B) backend
	}{
		{"bolt", func(b *testing.B) backend { return openBolt(b, b.TempDir()) }},
		{"redis", func(b *testing.B) backend { return openRedis(b, testenv.StartRedis(b)) }},
	} {
		b.Run(bk.name, func(b *testing.B) {
			inv := newInventory(b, bk.open(b), "h1", poolSpec, pool(poolSize), nil)
			ctx := b.Context()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				c := Consumer{UUID: fmt.Sprint("u-", i), Name: fmt.Sprint("vm", i)}
				held, _, err := inv.Claim(ctx, c, []model.PCIAlias{{Name: "gpu", Count: 1}})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := inv.Release(ctx, c.UUID, nil); err != nil {
					b.Fatal(err)
				}
				if _, err := inv.Clean(ctx, held[0].Address); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
