package ops

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/virt"
)

// TestResolveAffect: the request's --live/--config choice becomes
// libvirt's flags for a domain that runs or not, and a choice the
// domain's state does not allow is refused (ErrState) saying why.
func TestResolveAffect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a       types.Affect
		running bool
		want    virt.Affect
		refused string
	}{
		{name: "no flag, shut off", want: virt.AffectConfig},
		{name: "no flag, running", running: true, want: virt.AffectLive | virt.AffectConfig},
		{name: "config, shut off", a: types.Affect{Config: true}, want: virt.AffectConfig},
		{name: "live, running", a: types.Affect{Live: true}, running: true, want: virt.AffectLive},
		{name: "live and config, running", a: types.Affect{Live: true, Config: true}, running: true, want: virt.AffectLive | virt.AffectConfig},
		{name: "live, shut off", a: types.Affect{Live: true}, refused: "--live needs a running domain"},
		{name: "config alone, running", a: types.Affect{Config: true}, running: true, refused: "--config alone on a running domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveAffect(tc.a, tc.running)
			if tc.refused != "" {
				if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("resolveAffect(%+v, running=%t) = %v, %v; want ErrState saying %q", tc.a, tc.running, got, err, tc.refused)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("resolveAffect(%+v, running=%t) = %v, %v; want %v", tc.a, tc.running, got, err, tc.want)
			}
		})
	}
}
