package daemon

import (
	"slices"
	"testing"
)

// TestReconcilerComponent: the reconciler is a component of its own,
// started once interrupted key rotations are recovered (a pass may touch
// any instance) and before the shares and the servers; it stops before
// them in reverse.
func TestReconcilerComponent(t *testing.T) {
	var names []string
	for _, c := range (&serve{}).components() {
		names = append(names, c.name)
	}
	at := func(name string) int {
		i := slices.Index(names, name)
		if i < 0 {
			t.Fatalf("no component %q in %v", name, names)
		}
		return i
	}
	r := at("reconciler")
	if r < at("controller") || r < at("key rotation") || r > at("shares") || r > at("servers") {
		t.Errorf("components %v: the reconciler must start after the controller and the key rotation's recovery, before the shares and the servers", names)
	}
	if c := (&serve{}).components()[r]; c.stop == nil {
		t.Error("the reconciler component has no stop")
	}
}
