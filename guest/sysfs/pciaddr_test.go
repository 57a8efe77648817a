package sysfs

import (
	"testing"

	"github.com/vmeta/vmeta/internal/model"
)

// TestIsPCIAddressAgreesWithModel: the agent's own check of a PCI
// function name accepts exactly what model.IsPCIAddress (the host's, which
// the agent no longer links) accepts.
func TestIsPCIAddressAgreesWithModel(t *testing.T) {
	for _, s := range []string{"0000:00:02.0", "ffff:ff:1f.7", "0000:00:02.8", "0000:00:02.a", "0000:00:02", "0000:00:02.00",
		"000g:00:02.0", "0000:0A:02.0", "0000-00:02.0", "0000:00-02.0", "0000:00:02-0", "", "virtio0", "pci0000:00", "0000:00:1f.7\n"} {
		if got, want := isPCIAddress(s), model.IsPCIAddress(s); got != want {
			t.Errorf("isPCIAddress(%q) = %v, model says %v", s, got, want)
		}
	}
}

func FuzzIsPCIAddress(f *testing.F) {
	f.Add("0000:00:02.0")
	f.Add("0000:00:02.9")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isPCIAddress(s), model.IsPCIAddress(s); got != want {
			t.Errorf("isPCIAddress(%q) = %v, model says %v", s, got, want)
		}
	})
}
