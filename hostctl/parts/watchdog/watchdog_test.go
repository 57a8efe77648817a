package watchdog

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
)

func TestAction(t *testing.T) {
	cases := []struct {
		name           string
		flavor, image  map[string]string
		want, wantXML  string
		wantErrContain string
	}{
		{name: "neither: disabled"},
		{name: "flavor", flavor: map[string]string{FlavorExtraSpec: "reset"}, want: Reset, wantXML: "<watchdog model='i6300esb' action='reset'/>"},
		{name: "image", image: map[string]string{ImageProperty: "pause"}, want: Pause, wantXML: "<watchdog model='i6300esb' action='pause'/>"},
		{name: "the image wins", flavor: map[string]string{FlavorExtraSpec: "reset"}, image: map[string]string{ImageProperty: "poweroff"}, want: PowerOff, wantXML: "<watchdog model='i6300esb' action='poweroff'/>"},
		{name: "none: a device that does nothing", flavor: map[string]string{FlavorExtraSpec: "none"}, want: None, wantXML: "<watchdog model='i6300esb' action='none'/>"},
		{name: "image disables the flavor's", flavor: map[string]string{FlavorExtraSpec: "reset"}, image: map[string]string{ImageProperty: "disabled"}},
		{name: "bad flavor value", flavor: map[string]string{FlavorExtraSpec: "dump"}, wantErrContain: `flavor f1 extra_specs.hw:watchdog_action: "dump": must be one of`},
		{name: "bad image value", image: map[string]string{ImageProperty: "Reset"}, wantErrContain: `image img properties.hw_watchdog_action: "Reset"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := &part.Instance{Spec: &model.Instance{Name: "vm", Flavor: "f1", Image: "img"}, FlavorExtraSpecs: tc.flavor, ImageProperties: tc.image}
			err := New().Check(context.Background(), part.Apply, in)
			var c part.Contribution
			perr := New().Prepare(context.Background(), part.Apply, in, nil, &c)
			if tc.wantErrContain != "" {
				var se *model.SpecError
				if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.wantErrContain) {
					t.Fatalf("Check: err = %v, want a spec error containing %q", err, tc.wantErrContain)
				}
				if perr == nil {
					t.Fatal("Prepare accepted a bad action")
				}
				return
			}
			if err != nil || perr != nil {
				t.Fatalf("Check: %v, Prepare: %v", err, perr)
			}
			switch {
			case tc.wantXML == "" && len(c.Devices) != 0:
				t.Fatalf("disabled: devices %+v", c.Devices)
			case tc.wantXML != "" && (len(c.Devices) != 1 || string(c.Devices[0].XML) != tc.wantXML):
				t.Fatalf("devices = %+v, want %s", c.Devices, tc.wantXML)
			case tc.wantXML != "" && c.Devices[0].Detail != "i6300esb, action "+tc.want:
				t.Fatalf("detail = %q", c.Devices[0].Detail)
			}
		})
	}
}
