package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestPartsClaimMACsInTheStore: the nics part the daemon registers keeps
// its MAC claims in the store useMACStore gives it: a second instance is
// refused the first one's MAC.
func TestPartsClaimMACsInTheStore(t *testing.T) {
	parts, _ := Parts(PartsConfig{Disks: disks.New(disks.Options{}), Faults: faults.New(nil, nil)})
	useMACStore(parts, stores.Bolt(t), nil)
	var cl part.Claimer
	for _, p := range parts {
		if p.Name() == "nics" {
			cl, _ = p.(part.Claimer)
		}
	}
	if cl == nil {
		t.Fatal("no nics part claims")
	}
	nic := []model.NIC{{MAC: "52:54:00:00:00:01"}}
	// a's apply is under way (its claim pending): b is refused the MAC.
	if _, err := cl.Claim(t.Context(), part.Apply, &part.Instance{Spec: &model.Instance{Name: "a", UUID: "00000000-0000-4000-8000-00000000000a", NICs: nic}}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.Claim(t.Context(), part.Apply, &part.Instance{Spec: &model.Instance{Name: "b", UUID: "00000000-0000-4000-8000-00000000000b", NICs: nic}})
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "instance a") {
		t.Fatalf("b with a's MAC: %v", err)
	}
}
