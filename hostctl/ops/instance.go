package ops

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// need is the state an operation needs its instance in, besides what the
// parts' Check allow (hostctl/parts/vmstate refuses one shelved or
// rescued, or for unshelve and unrescue one that is not).
type need int

const (
	// withHypervisor: on a host with a hypervisor.
	withHypervisor need = iota
	// stopped: its domain shut off (any, on a host without a
	// hypervisor).
	stopped
)

// instance returns the record and spec of this host's instance name for
// op, refused (ErrState, ErrNoHypervisor) when it is not as n needs;
// the parts' Check phase sees op, and what names the operation in errors
// ("attach disk to"; op's name when empty).
func instance(ctx context.Context, f Frame, what string, op part.Op, name string, n need) (store.Instance, *model.Instance, error) {
	if what == "" {
		what = string(op)
	}
	rec, in, err := f.OpInstance(ctx, what, op, name)
	if err != nil {
		return store.Instance{}, nil, err
	}
	switch hv, _ := f.Capabilities(); {
	case n == withHypervisor && !hv:
		return store.Instance{}, nil, fmt.Errorf("%s %s: %w", what, name, controller.ErrNoHypervisor)
	case n == stopped && hv:
		cur, err := f.CurrentDomain(ctx, name, rec.UUID)
		if err != nil {
			return store.Instance{}, nil, fmt.Errorf("%s %s: %w", what, name, err)
		}
		if cur.Running {
			return store.Instance{}, nil, fmt.Errorf("%s %s: %w: the instance is %s; stop it first", what, name, controller.ErrState, cur.State)
		}
	}
	return rec, in, nil
}
