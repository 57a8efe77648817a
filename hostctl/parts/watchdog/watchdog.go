// Package watchdog is the i6300esb watchdog as a host part
// (hostctl/part), as Nova has it: the flavor extra spec
// hw:watchdog_action or the image property hw_watchdog_action (the
// image's wins) names what QEMU does when the guest stops petting the
// watchdog — pause, poweroff, reset or none (the device is there and
// does nothing) — and disabled, the default, means no device.
//
// The part contributes <watchdog model='i6300esb' action='…'/> to every
// domain hostctl builds for the instance (apply, resize, rebuild,
// rescue, unshelve); shelve carries the setting in the flavor and the
// image, so unshelve adds the device again.
package watchdog

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// The flavor extra spec and image property naming the action.
const (
	FlavorExtraSpec = "hw:watchdog_action"
	ImageProperty   = "hw_watchdog_action"
)

// Model is the emulated device.
const Model = "i6300esb"

// The actions; Disabled means no device.
const (
	Disabled = "disabled"
	Pause    = "pause"
	PowerOff = "poweroff"
	Reset    = "reset"
	None     = "none"
)

var actions = map[string]bool{Disabled: true, Pause: true, PowerOff: true, Reset: true, None: true}

// Part is the watchdog part.
type Part struct{}

// New returns the watchdog part.
func New() Part { return Part{} }

// Name implements part.Part.
func (Part) Name() string { return "watchdog" }

const domainWhy = "the watchdog is a device of the domain this operation builds"

// Answers implements part.Part.
func (Part) Answers() part.Answers {
	nothing := part.Answer{Do: part.Nothing}
	return part.Answers{
		part.Apply:       {Do: part.Act, Why: domainWhy},
		part.Start:       nothing,
		part.Stop:        nothing,
		part.RebootSoft:  nothing,
		part.RebootHard:  nothing,
		part.Delete:      nothing,
		part.ForceDelete: nothing,
		part.Adopt:       nothing,
		// Carried: the action stays in the flavor and the image while the
		// domain is gone; unshelve adds the device again.
		part.Shelve:   {Do: part.Nothing, Why: "carried: the setting stays in the flavor and image"},
		part.Unshelve: {Do: part.Act, Why: domainWhy},
		part.Rescue:   {Do: part.Act, Why: domainWhy},
		// Unrescue redefines the domain rescue kept, watchdog included.
		part.Unrescue:         {Do: part.Nothing, Why: "the kept domain has the device"},
		part.Resize:           {Do: part.Act, Why: domainWhy + " (the new flavor's action)"},
		part.Rebuild:          {Do: part.Act, Why: domainWhy + " (the new image's action)"},
		part.Snapshot:         nothing,
		part.MigrateCold:      {Do: part.Act, Why: domainWhy + " (the destination's)"},
		part.MigrateLive:      {Do: part.Act, Why: domainWhy + " (libvirt carries the device in the migrated domain)"},
		part.ConfirmMigration: {Do: part.Nothing, Why: "the source's domain goes with its device"},
		part.RevertMigration:  {Do: part.Nothing, Why: "the source's domain still has the device"},
		part.Evacuate:         {Do: part.Act, Why: domainWhy + " (the new host's)"},
	}
}

// Action returns the instance's watchdog action (Disabled when neither
// its flavor nor its image names one), or a *model.SpecError naming the
// extra spec or property and its value when that is not an action.
func Action(in *part.Instance) (string, error) {
	act, field := Disabled, ""
	if v, ok := in.FlavorExtraSpecs[FlavorExtraSpec]; ok {
		act, field = v, fmt.Sprintf("flavor %s extra_specs.%s", in.Spec.Flavor, FlavorExtraSpec)
	}
	if v, ok := in.ImageProperties[ImageProperty]; ok {
		act, field = v, fmt.Sprintf("image %s properties.%s", in.Spec.Image, ImageProperty)
	}
	if !actions[act] {
		return "", &model.SpecError{Errors: []model.FieldError{{Field: field, Value: act,
			Rule: "must be one of disabled, pause, poweroff, reset, none"}}}
	}
	return act, nil
}

// Check implements part.Part: an action that is none of Nova's is
// refused.
func (Part) Check(_ context.Context, op part.Op, in *part.Instance) error {
	if _, err := Action(in); err != nil {
		return fmt.Errorf("watchdog: %w", err)
	}
	return nil
}

// Prepare implements part.Part: the device, unless disabled. It changes
// nothing outside the domain, so it registers no undo step.
func (p Part) Prepare(_ context.Context, _ part.Op, in *part.Instance, _ *revert.Reverter, c *part.Contribution) error {
	devs, err := p.Devices(in)
	if err != nil {
		return err
	}
	c.Devices = append(c.Devices, devs...)
	return nil
}

// Devices implements part.Part.
func (Part) Devices(in *part.Instance) ([]part.Device, error) {
	act, err := Action(in)
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	if act == Disabled {
		return nil, nil
	}
	return []part.Device{{
		Kind:   "watchdog",
		Detail: fmt.Sprintf("%s, action %s", Model, act),
		XML:    fmt.Appendf(nil, "<watchdog model='%s' action='%s'/>", Model, act),
	}}, nil
}

// AfterStart implements part.Part (nothing to do).
func (Part) AfterStart(context.Context, *part.Instance) error { return nil }

// AfterStop implements part.Part (nothing to do).
func (Part) AfterStop(context.Context, *part.Instance) error { return nil }

// AfterDelete implements part.Part (nothing to do).
func (Part) AfterDelete(context.Context, *part.Instance) error { return nil }
