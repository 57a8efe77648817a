package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/revert"
)

// The config drive's media in the cdrom of a running domain follow every
// publish. A part does it (hostctl/parts/configdrive), registered with
// the others (Options.Parts); the core builds the drive, hands it to the
// part before the store write and puts it in place after, and knows
// nothing of how the media are named, swapped or pruned. Without the
// part a running domain keeps the drive it booted with.

// mediaChanger is a part that hands each publish's config drive to the
// instance's running domain.
type mediaChanger interface {
	// ChangeMedium hands staged, the config drive the publish of
	// instance name's revision rev built ("" when it has none), to the
	// instance's domain before the store write; its undo steps go on r.
	// commit runs once the write stood and the drive is in place;
	// warnings go to the publish's answer.
	ChangeMedium(ctx context.Context, r *revert.Reverter, name, staged string, rev int64) (commit func(), warnings []string, err error)
	// DriveTransport says which revision the config drive carries to
	// the guest of instance name (running: whether its domain runs).
	DriveTransport(ctx context.Context, name string, running bool) part.Transport
}

// media is the registered mediaChanger, nil when there is none.
func (c *Controller) media() mediaChanger {
	for _, p := range c.parts {
		if m, ok := p.(mediaChanger); ok {
			return m
		}
	}
	return nil
}

// changeMedium is mediaChanger.ChangeMedium of the registered part, if any
// (commit is never nil).
func (c *Controller) changeMedium(ctx context.Context, r *revert.Reverter, name, staged string, rev int64) (func(), []string, error) {
	m := c.media()
	if m == nil {
		return func() {}, nil, nil
	}
	return m.ChangeMedium(ctx, r, name, staged, rev)
}

// driveTransport is the config drive's transport of instance name, as the
// registered mediaChanger tells it (none without one).
func (c *Controller) driveTransport(ctx context.Context, name string, running bool) []part.Transport {
	m := c.media()
	if m == nil {
		return nil
	}
	return []part.Transport{m.DriveTransport(ctx, name, running)}
}
