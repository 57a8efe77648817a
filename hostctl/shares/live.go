package shares

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Live attach and detach: a virtiofs share hot-plugged into a running
// instance, or out of it (live and persistent configuration; libvirt 9.0
// starts its virtiofsd), and the instance's metadata republished. The
// specification itself only attaches to SHUTOFF instances; this is
// `hostctl share attach|detach --live`.

// LiveCore is the hot-plug of a part's device into a running instance
// (hostctl/ops, liveshares.go, over the core's device-change primitives);
// the service finds it on its Instances (the daemon's gives it), and one
// without it refuses live attach and detach.
type LiveCore interface {
	// LiveXML is the running domain's XML of this host's instance name.
	LiveXML(ctx context.Context, name string) ([]byte, error)
	// ChangeLive hot-plugs the device plan gives into the running
	// instance name, or out of it, and stores and republishes the spec
	// plan gives with it, under the instance's lock, undoing every step
	// on failure; it returns the change's warnings.
	ChangeLive(ctx context.Context, op, name string, plan func(in *model.Instance, liveXML []byte) (part.LiveDevice, error)) ([]string, error)
}

// sharedMemoryRE finds shared guest memory in a domain's XML (libvirt
// writes <access mode='shared'/> inside <memoryBacking>).
var sharedMemoryRE = regexp.MustCompile(`(?s)<memoryBacking>.*<access mode=['"]shared['"]/>.*</memoryBacking>`)

// sharedMemory refuses, with ErrState, a live attach to a running domain
// (liveXML) whose memory is not shared: virtiofs cannot be given shared
// memory afterwards (the instance booted without shares, and without
// --shared-memory).
func sharedMemory(name string, liveXML []byte) error {
	if !sharedMemoryRE.Match(liveXML) {
		return fmt.Errorf("attach share to %s: %w: the running domain's memory is not shared (it booted without shares), and virtiofs needs shared memory from boot: stop the instance and attach the share cold", name, part.ErrState)
	}
	return nil
}

// checkLive tells whether a share can be hot-plugged into the running
// instance name now: it runs, and its memory is shared. Asked before an
// attach changes anything.
func checkLive(ctx context.Context, lc LiveCore, name string) error {
	doc, err := lc.LiveXML(ctx, name)
	if err != nil {
		return err
	}
	return sharedMemory(name, doc)
}

// plugLive hot-plugs share sh into the running instance name.
func (s *Service) plugLive(ctx context.Context, lc LiveCore, name string, sh model.Share) ([]string, error) {
	return lc.ChangeLive(ctx, "attach share to", name, func(in *model.Instance, doc []byte) (part.LiveDevice, error) {
		if err := sharedMemory(name, doc); err != nil {
			return part.LiveDevice{}, err
		}
		live, err := virt.ParseDevices(doc)
		if err != nil {
			return part.LiveDevice{}, fmt.Errorf("attach share to %s: %w", name, err)
		}
		tag := sh.EffectiveTag()
		if _, used := live.Share(tag); used {
			return part.LiveDevice{}, &model.SpecError{Errors: []model.FieldError{{Field: "share.tag", Value: tag, Rule: "is already the tag of a virtiofs share of the domain"}}}
		}
		in.Shares = append(slices.DeleteFunc(in.Shares, func(x model.Share) bool { return x.ShareID == sh.ShareID }), sh)
		dirs, err := s.root.Dirs([]model.Share{sh})
		if err != nil {
			return part.LiveDevice{}, fmt.Errorf("attach share to %s: %w", name, err)
		}
		dev, err := virt.ShareDeviceXML(sh, virt.Host{ShareDirs: dirs})
		if err != nil {
			return part.LiveDevice{}, fmt.Errorf("attach share to %s: %w", name, err)
		}
		return part.LiveDevice{Spec: in, XML: dev, What: "share " + tag}, nil
	})
}

// unplugLive hot-unplugs the share with share ID id from the running
// instance name. The guest must release the device; if it has not within
// the core's detach timeout, the answer carries a warning.
func (s *Service) unplugLive(ctx context.Context, lc LiveCore, name, id string) ([]string, error) {
	return lc.ChangeLive(ctx, "detach share from", name, func(in *model.Instance, _ []byte) (part.LiveDevice, error) {
		i := slices.IndexFunc(in.Shares, func(x model.Share) bool { return x.ShareID == id })
		if i < 0 {
			return part.LiveDevice{}, fmt.Errorf("detach share from %s: %w: the instance has no share %s", name, store.ErrNotFound, id)
		}
		sh := in.Shares[i]
		dev, err := virt.ShareDeviceXML(sh, virt.Host{ShareDirs: map[string]string{sh.ShareID: sh.Source}})
		if err != nil {
			return part.LiveDevice{}, fmt.Errorf("detach share from %s: %w", name, err)
		}
		tag := sh.EffectiveTag()
		in.Shares = slices.Delete(in.Shares, i, i+1)
		return part.LiveDevice{Spec: in, XML: dev, Detach: true, What: "share " + tag, Present: func(doc []byte) bool {
			live, err := virt.ParseDevices(doc)
			if err != nil {
				return true
			}
			_, ok := live.Share(tag)
			return ok
		}}, nil
	})
}
