package nics

import (
	"context"
	"slices"
	"time"

	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// The leases a network's DHCP server (libvirt's dnsmasq) has handed out,
// beside the fixed host entries the part writes.
//
// dnsmasq does not give a NIC its fixed address while that address is
// still leased to another MAC (a deleted guest's lease runs for an hour,
// a dynamic client's too): it hands out a dynamic address instead, and
// the guest lives where its metadata does not say (the metadata service
// then does not know it by address). So every start reports a fixed
// address of the instance leased to another MAC — a warning and an event
// on the instances stream; the start goes on, as the holder may be a live
// guest — and the leases of an instance's removed fixed addresses are
// released once the delete (or the apply that dropped the NIC) stands,
// as OpenStack Neutron releases a deleted port's, so the address can be
// handed out again at once.

// LeaseLister is what a Network may add (*virt.Conn has it): the leases a
// network's DHCP server holds now.
type LeaseLister interface {
	ActiveLeases(ctx context.Context, network string) ([]virt.Lease, error)
}

// LeaseReleaser is what a Network may add (*virt.Conn has it): ending the
// DHCP server's lease of ip held by mac.
type LeaseReleaser interface {
	ReleaseLease(ctx context.Context, network, ip, mac string) error
}

// Emitter records an event on an audit stream (an *events.Log).
type Emitter interface {
	Emit(ctx context.Context, stream, typ string, payload any) (events.Event, error)
}

var (
	_ LeaseLister   = (*virt.Conn)(nil)
	_ LeaseReleaser = (*virt.Conn)(nil)
	_ Emitter       = (*events.Log)(nil)
)

// EventAddressLeased is the type of the event a start emits on the
// instances stream (events.StreamInstances) for a fixed address leased to
// another MAC.
const EventAddressLeased = "instance.address_leased"

// AddressLeased is the payload of an EventAddressLeased event.
type AddressLeased struct {
	Name    string `json:"name"`
	UUID    string `json:"uuid,omitempty"`
	Network string `json:"network"`
	MAC     string `json:"mac"`     // the NIC's
	Address string `json:"address"` // its fixed address
	Holder  string `json:"holder_mac"`
	// Expires is when the holder's lease ends (RFC 3339; "" when it does
	// not).
	Expires string `json:"expires,omitempty"`
}

// UseEvents gives the part the audit log it emits EventAddressLeased on
// (nil: none; the warning is logged all the same). Call it before the
// core serves.
func (p *Part) UseEvents(e Emitter) { p.events = e }

// reportLeasedElsewhere warns about each fixed address of in (byNet: its
// leases by network, nets in order) that the network's DHCP server has
// leased to another MAC. What cannot be listed is logged; nothing here
// fails the start.
func (p *Part) reportLeasedElsewhere(ctx context.Context, in *model.Instance, nets []string, byNet map[string][]lease) {
	ll, ok := p.net.(LeaseLister)
	if !ok {
		return
	}
	for _, n := range nets {
		active, err := ll.ActiveLeases(ctx, n)
		if err != nil {
			p.log().Warn("DHCP leases not checked: the network's leases could not be listed", "instance", in.Name, "network", n, "err", err)
			continue
		}
		for _, l := range byNet[n] {
			for _, a := range active {
				if a.IP != l.ip || a.MAC == l.mac {
					continue
				}
				ev := AddressLeased{Name: in.Name, UUID: in.UUID, Network: n, MAC: l.mac, Address: l.ip, Holder: a.MAC}
				expires := "never"
				if !a.Expiry.IsZero() {
					ev.Expires = a.Expiry.UTC().Format(time.RFC3339)
					expires = ev.Expires
				}
				p.log().Warn("a fixed address of the instance is leased to another MAC: the network's DHCP server gives the NIC a dynamic address instead until that lease ends or is released, and the metadata service will not know the guest by address",
					"instance", in.Name, "network", n, "mac", l.mac, "address", l.ip, "holder_mac", a.MAC, "expires", expires)
				if p.events != nil {
					_, _ = p.events.Emit(ctx, events.StreamInstances, EventAddressLeased, ev)
				}
			}
		}
	}
}

// pendRelease notes that the fixed lease l of instance name left its
// network: once the operation stands (releaseLeases), the DHCP server's
// lease of l's address by l's MAC is released. A failed operation puts
// the fixed lease back, and the note goes with it (on r).
func (p *Part) pendRelease(name string, l lease, r *revert.Reverter) {
	if _, ok := p.net.(LeaseReleaser); !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Contains(p.pending[name], l) {
		return
	}
	if p.pending == nil {
		p.pending = map[string][]lease{}
	}
	p.pending[name] = append(p.pending[name], l)
	r.Add("keep the DHCP server's lease of "+l.String(), func(context.Context) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.pending[name] = slices.DeleteFunc(p.pending[name], func(x lease) bool { return x == l })
		if len(p.pending[name]) == 0 {
			delete(p.pending, name)
		}
		return nil
	})
}

// releaseLeases releases the DHCP server's leases pendRelease noted for
// in, but those of fixed leases in has again (keep). Best effort: a
// failure is logged (the lease then runs out by itself), never returned.
func (p *Part) releaseLeases(ctx context.Context, in *model.Instance, keep []lease) {
	p.mu.Lock()
	ls := p.pending[in.Name]
	delete(p.pending, in.Name)
	p.mu.Unlock()
	rl, ok := p.net.(LeaseReleaser)
	if !ok {
		return
	}
	for _, l := range ls {
		if slices.Contains(keep, l) {
			continue
		}
		if err := rl.ReleaseLease(ctx, l.network, l.ip, l.mac); err != nil {
			p.log().Warn("the DHCP server's lease of a removed fixed address not released: another guest configured for the address gets a dynamic one until the lease ends", "instance", in.Name, "network", l.network, "mac", l.mac, "address", l.ip, "err", err)
			continue
		}
		p.log().Info("DHCP lease of a removed fixed address released", "instance", in.Name, "network", l.network, "mac", l.mac, "address", l.ip)
	}
}
