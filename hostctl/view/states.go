// Package view is how hostctl shows an instance beyond what its records
// say: the state instance list gives it — its domain's, a fault's, the
// state a part keeps — which hostctl's metrics count instances under too.
// It reads the hypervisor and the parts through the narrow interfaces
// below and imports neither the controller nor the daemon: the controller
// lists with it, the daemon hands it to the metrics.
package view

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/store"
)

// States an instance is shown in besides libvirt's own (virt.State).
const (
	// Missing: libvirt has no domain of the instance's name and UUID
	// (deleted behind hostctl's back).
	Missing = "missing"
	// Unknown: libvirtd cannot be asked.
	Unknown = "unknown"
	// Error: the instance is in ERROR (it has a fault) and its domain
	// does not run.
	Error = "error"
)

// Domains lists this host's libvirt domains (hostctl/virt).
type Domains interface {
	List(ctx context.Context) ([]virt.Domain, error)
}

// Faults gives the reasons of the instances in ERROR by lower-case UUID
// (hostctl/parts/faults).
type Faults interface {
	Faults(ctx context.Context) (map[string]string, error)
}

// Kept gives the states the parts keep for instances (shelved_offloaded,
// rescue: hostctl/parts/vmstate) by lower-case UUID.
type Kept interface {
	States(ctx context.Context) (map[string]string, error)
}

// States shows the states of instance records.
type States struct {
	// Host is this host; another host's instance has no domain here
	// ("": hosts are not tracked, every instance is this host's).
	Host string
	// Domains is this host's hypervisor (nil without one: no domain
	// states).
	Domains Domains
	// Faults and Kept are the parts that keep faults and states (nil:
	// none).
	Faults Faults
	Kept   Kept
	// Log takes the warning of a domain listing that failed (nil: none).
	Log *slog.Logger
}

// Shown is an instance's state and fault as instance list shows them.
type Shown struct {
	State string
	Fault string
}

// Of returns what instance list shows for each of recs (only Name, UUID
// and Host are read): for this host's instances their domain's state
// (running or shutoff, Missing, Unknown), Error for one with a fault
// whose domain neither runs nor is Unknown; nothing for another host's;
// and for any host's instance the state a part keeps, which wins. It
// reads only what is live — the domain list (one call, when recs is not
// empty), the fault and state records — never a spec.
func (s States) Of(ctx context.Context, recs []store.Instance) ([]Shown, error) {
	return s.of(ctx, recs, s.domainStates(ctx, len(recs) > 0))
}

// One is Of for one instance, rec, whose domain's state is state (as
// instance show reads it: paused and the other states too); libvirt is
// not listed.
func (s States) One(ctx context.Context, rec store.Instance, state string) (Shown, error) {
	shown, err := s.of(ctx, []store.Instance{rec}, func(string, string) string { return state })
	if err != nil {
		return Shown{}, err
	}
	return shown[0], nil
}

// of is Of with stateOf telling the domains' states.
func (s States) of(ctx context.Context, recs []store.Instance, stateOf func(name, uuid string) string) ([]Shown, error) {
	var faults, kept map[string]string
	var err error
	if s.Faults != nil {
		if faults, err = s.Faults.Faults(ctx); err != nil {
			return nil, fmt.Errorf("instance faults: %w", err)
		}
	}
	if s.Kept != nil {
		if kept, err = s.Kept.States(ctx); err != nil {
			return nil, fmt.Errorf("instance states: %w", err)
		}
	}
	out := make([]Shown, len(recs))
	for i, rec := range recs {
		uuid := strings.ToLower(rec.UUID)
		out[i].Fault = faults[uuid]
		if hosts.Owns(s.Host, rec.Host) {
			out[i].State = WithFault(stateOf(rec.Name, rec.UUID), out[i].Fault)
		}
		if st := kept[uuid]; st != "" {
			out[i].State = st
		}
	}
	return out, nil
}

// InstanceStates is Of's states alone: what hostctl/metrics counts
// instances under.
func (s States) InstanceStates(ctx context.Context, recs []store.Instance) ([]string, error) {
	shown, err := s.Of(ctx, recs)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(shown))
	for i, sh := range shown {
		out[i] = sh.State
	}
	return out, nil
}

// WithFault is the state shown for an instance whose domain is in state
// and whose fault is fault: Error when it has one and its domain neither
// runs (running, paused) nor is Unknown, otherwise state.
func WithFault(state, fault string) string {
	if fault == "" {
		return state
	}
	switch state {
	case string(virt.StateRunning), string(virt.StatePaused), Unknown:
		return state
	}
	return Error
}

// domainStates lists the domains once (some: whether there are any to
// ask about) and tells each instance's state from the listing: running
// or shutoff (instance show tells paused and the other states apart),
// Missing, or Unknown when libvirtd cannot be asked; "" without a
// hypervisor.
func (s States) domainStates(ctx context.Context, some bool) func(name, uuid string) string {
	if s.Domains == nil {
		return func(string, string) string { return "" }
	}
	var doms map[string]virt.Domain
	var listErr error
	if some {
		var ds []virt.Domain
		if ds, listErr = s.Domains.List(ctx); listErr == nil {
			doms = make(map[string]virt.Domain, len(ds))
			for _, dom := range ds {
				doms[dom.Name] = dom
			}
		} else if s.Log != nil {
			s.Log.Warn("list instances: cannot list libvirt domains", "err", listErr)
		}
	}
	return func(name, uuid string) string {
		dom, ok := doms[name]
		switch {
		case listErr != nil:
			return Unknown
		case !ok || dom.UUID != uuid:
			return Missing
		case dom.ID >= 0:
			return string(virt.StateRunning)
		default:
			return string(virt.StateShutoff)
		}
	}
}
