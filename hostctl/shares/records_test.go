package shares

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestTransitionRace: many movers (on Redis each with its own connection,
// as separate hostctl processes would be) read the same mapping and try
// to move it: exactly one write wins, every other gets ErrTransition
// (and store.ErrConflict) and changes nothing.
func TestTransitionRace(t *testing.T) {
	const movers = 16
	url := testenv.StartRedis(t)
	backends := map[string]func(t *testing.T) []Records{
		"bolt": func(t *testing.T) []Records {
			st := stores(t)["bolt"](t)
			out := make([]Records, movers)
			for i := range out {
				out[i] = st
			}
			return out
		},
		"redis": func(t *testing.T) []Records {
			out := make([]Records, movers)
			for i := range out {
				st, err := storeurl.Open(context.Background(), url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				out[i] = st
			}
			return out
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			sts := open(t)
			m := Mapping{Instance: "11111111-1111-4111-8111-111111111111", InstanceName: "a", ShareID: newUUID(), Tag: "t", Status: types.ShareInactive}
			if err := createMapping(ctx, sts[0], &m); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			won, lost := 0, 0
			start := make(chan struct{})
			for i := range movers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					mine, err := loadMapping(ctx, sts[i], m.Instance, m.ShareID)
					if err != nil {
						t.Error(err)
						return
					}
					<-start
					to := types.ShareActive
					if i%2 == 1 {
						to = types.ShareDetaching
					}
					err = transition(ctx, sts[i], &mine, to, "", types.ShareInactive)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						won++
					case errors.Is(err, ErrTransition) && errors.Is(err, store.ErrConflict):
						lost++
					default:
						t.Errorf("mover %d: %v", i, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			t.Logf("FIGURE %s: %d movers of one mapping: %d won, %d refused", name, movers, won, lost)
			if won != 1 || lost != movers-1 {
				t.Errorf("won %d, lost %d; want exactly one winner", won, lost)
			}
			final, err := loadMapping(ctx, sts[0], m.Instance, m.ShareID)
			if err != nil || final.version != 2 {
				t.Errorf("final mapping version %d (%v), want 2: one write", final.version, err)
			}
		})
	}
}
