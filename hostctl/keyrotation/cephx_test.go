package keyrotation_test

import (
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
)

// TestCephXPolicy: the cephx class takes Disabled and KeyGeneration with
// keepPriorKeyCount (it rotates by overlapping), and refuses
// WithVersionUpgrade with the specification's reason.
func TestCephXPolicy(t *testing.T) {
	one := 1
	for _, tc := range []struct {
		p    keyrotation.Policy
		want string
	}{
		{p: keyrotation.Policy{KeyRotationPolicy: keyrotation.Disabled}},
		{p: keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 3, KeepPriorKeyCount: &one}},
		{p: keyrotation.Policy{KeyRotationPolicy: keyrotation.WithVersionUpgrade}, want: "existing mounts' connectivity"},
	} {
		err := tc.p.Check(keyrotation.CephX)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.want)
		}
	}
	if c, err := keyrotation.ParseClass("cephx"); err != nil || c != keyrotation.CephX || !c.Overlapping() || c.Daemon() || c.PerInstance() {
		t.Errorf("ParseClass(cephx) = %v, %v", c, err)
	}
	if p := (keyrotation.Policy{}); p.Keep(keyrotation.CephX) != 1 {
		t.Errorf("default keepPriorKeyCount for cephx: %d, want 1", p.Keep(keyrotation.CephX))
	}
}
