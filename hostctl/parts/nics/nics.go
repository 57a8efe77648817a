// Package nics is the host part of an instance's NICs (hostctl/part):
// their fixed DHCP leases in libvirt's networks, so that the metadata
// service knows a guest's source address before it boots.
//
// An apply writes the leases its NICs need into the networks' persistent
// definitions only (a live update reloads the network's firewall rules
// and dnsmasq: 0.5–1 s, most of an apply), and makes them live at once
// when the domain runs. Every start of the domain — start, hard reboot,
// unshelve, unrescue, and the rescue domain's start — brings them to the
// running network first, and takes back what it brought when the start
// fails. Delete removes them (restored when the delete fails). A NIC's
// static IPv4 address joins the instance's addresses at apply.
//
// The network's DHCP server does not hand out a fixed address another MAC
// still holds a lease of (dhcpleases.go): a start reports such an
// address, and the leases of the fixed addresses a delete (or an apply)
// removed are released once it stands.
//
// The part also keeps the NICs' MAC addresses and the instance's
// addresses unique across the hosts sharing the store (macs.go): an
// apply or a NIC hot-plug claims the MACs atomically, and an address
// another instance has is refused up front, naming the field; so is one
// inside the metadata service's trusted proxy networks (proxies.go).
package nics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// DHCP edits the fixed leases of libvirt networks.
type DHCP interface {
	DHCPHosts(ctx context.Context, network string) ([]virt.DHCPHost, error)
	AddDHCPHost(ctx context.Context, network string, h virt.DHCPHost) error
	RemoveDHCPHost(ctx context.Context, network, mac string) error
}

// LiveDHCP is what a DHCP role may add (*virt.Conn has it): leases
// written to a network's persistent definition only, and brought to the
// running network when a guest that needs them starts. libvirt's live
// update of a DHCP host reloads the network's firewall rules and dnsmasq
// (0.5–1 s, most of an apply); the persistent one is a file write. A
// network that starts later reads its leases from its definition.
type LiveDHCP interface {
	AddDHCPHostConfig(ctx context.Context, network string, h virt.DHCPHost) error
	LiveDHCPHosts(ctx context.Context, network string) ([]virt.DHCPHost, error)
	SyncLiveDHCPHosts(ctx context.Context, network string, macs []string) (int, error)
	RemoveLiveDHCPHost(ctx context.Context, network, mac string) error
}

// Network is the hypervisor as the part uses it: the networks' leases
// and whether a domain runs.
type Network interface {
	DHCP
	State(ctx context.Context, name string) (virt.State, error)
}

var (
	_ LiveDHCP       = (*virt.Conn)(nil)
	_ Network        = (*virt.Conn)(nil)
	_ part.Claimer   = (*Part)(nil)
	_ part.Definer   = (*Part)(nil)
	_ part.Starter   = (*Part)(nil)
	_ part.Remover   = (*Part)(nil)
	_ part.Committer = (*Part)(nil)
)

// Part is the NICs part.
type Part struct {
	net            Network
	defaultNetwork string
	st             Store // the MAC claims and the address index (nil: none)
	logger         *slog.Logger
	proxies        []netip.Prefix // the metadata service's trusted proxy networks (proxies.go)
	events         Emitter        // where a fixed address leased to another MAC is reported (nil: the log only)

	mu      sync.Mutex
	pending map[string][]lease // by instance: fixed leases removed, their DHCP leases to release (dhcpleases.go)
}

// New returns the part over the hypervisor's networks (nil: no
// hypervisor, the part does nothing); a NIC without a network is on
// defaultNetwork (model.DefaultNetwork when "").
func New(net Network, defaultNetwork string) *Part {
	if defaultNetwork == "" {
		defaultNetwork = model.DefaultNetwork
	}
	return &Part{net: net, defaultNetwork: defaultNetwork}
}

// UseStore gives the part the store its MAC claims are kept in and whose
// address index it checks (without one it claims and checks nothing:
// the store's Put still refuses a taken address), and its logger (nil:
// slog's default). Call it before the core serves.
func (p *Part) UseStore(st Store, log *slog.Logger) {
	p.st, p.logger = st, log
}

func (p *Part) log() *slog.Logger {
	if p.logger != nil {
		return p.logger
	}
	return slog.Default()
}

// Name implements part.Part.
func (*Part) Name() string { return "nics" }

// Answers implements part.Part.
func (*Part) Answers() part.Answers {
	sync := part.Answer{Do: part.Act, Why: "the NICs' fixed DHCP leases follow the spec once the domain is defined (live when it runs); the MAC claims are carried"}
	live := part.Answer{Do: part.Act, Why: "the leases go live before the domain starts (taken back when the start fails); a fixed address the network's DHCP server has leased to another MAC is reported"}
	return part.Answers{
		part.Apply:            {Do: part.Act, Why: "claims the NICs' MAC addresses in the store and refuses an address another instance has or one in a trusted proxy network, before anything changes (macs.go, proxies.go); the leases follow the spec once the domain is defined (live when it runs)"},
		part.Start:            live,
		part.Stop:             {Do: part.Nothing, Why: "the leases stay: the instance keeps its addresses"},
		part.RebootSoft:       {Do: part.Nothing, Why: "the domain keeps running, its leases live"},
		part.RebootHard:       live,
		part.Delete:           {Do: part.Act, Why: "the leases leave the networks (restored when the delete fails); the MAC claims, and the DHCP server's leases of the fixed addresses, are released once the record is gone"},
		part.ForceDelete:      {Do: part.Act, Why: "releases the MAC claims (the store's); the leases are in the dead host's networks, out of reach (force-delete lists them as left behind)"},
		part.Adopt:            {Do: part.Nothing, Why: "the MAC claims are the store's, not a host's: the adopting apply carries them, and writes the leases into this host's networks"},
		part.Shelve:           {Do: part.Nothing, Why: "the leases and the MAC claims stay with the instance's addresses"},
		part.Unshelve:         live,
		part.Rescue:           {Do: part.Act, Why: "the leases go live before the rescue domain (same NICs) starts"},
		part.Unrescue:         live,
		part.Resize:           sync,
		part.Rebuild:          sync,
		part.Snapshot:         {Do: part.Nothing},
		part.MigrateCold:      {Do: part.Act, Why: "same MACs and addresses on the destination: its apply puts the fixed DHCP entries on its network (the MAC claims are the store's, carried)"},
		part.MigrateLive:      {Do: part.Act, Why: "same MACs and addresses: the destination's republish after the switchover puts the fixed DHCP entries on its network, the source's go (Moved)"},
		part.ConfirmMigration: {Do: part.Act, Why: "the source's DHCP entries go (Moved); the MAC claims stay with the instance"},
		part.RevertMigration:  {Do: part.Act, Why: "the destination's DHCP entries go (Moved); the MAC claims stay with the instance"},
		part.Evacuate:         {Do: part.Act, Why: "same MACs and addresses on the new host: its apply puts the fixed DHCP entries on its network; the dead host's entries go when it comes back (Moved)"},
	}
}

// Check implements part.Part: an apply is refused an address another
// instance has, and an apply, resize or rebuild one inside a trusted
// proxy network (proxies.go), the field named; nothing else is refused
// here.
func (p *Part) Check(ctx context.Context, op part.Op, in *part.Instance) error {
	if op == part.Apply && p.st != nil {
		if err := p.checkAddresses(ctx, in.Spec); err != nil {
			return err
		}
	}
	if publishes(op) {
		return p.checkProxyAddresses(in.Spec)
	}
	return nil
}

// Claim implements part.Claimer: each NIC's static IPv4 address joins
// the instance's addresses (see addStaticAddresses), an apply is refused
// an address another instance has (as Check would, but before a MAC is
// claimed, so a spec that repeats another instance's NIC is told about
// the address first, as before claims existed), and each MAC address is
// claimed (ClaimMACs).
func (p *Part) Claim(ctx context.Context, op part.Op, in *part.Instance) (func(context.Context, error), error) {
	if p.net != nil {
		addStaticAddresses(in.Spec)
	}
	if op == part.Apply && p.st != nil {
		if err := p.checkAddresses(ctx, in.Spec); err != nil {
			return nil, err
		}
	}
	return p.ClaimMACs(ctx, string(op), in.Spec, in.Old)
}

// Prepare implements part.Part: rescue makes the leases live before the
// rescue domain starts.
func (p *Part) Prepare(ctx context.Context, op part.Op, in *part.Instance, r *revert.Reverter, _ *part.Contribution) error {
	if p.net == nil || op != part.Rescue {
		return nil
	}
	return p.liveLeases(ctx, r, in.Spec)
}

// Remove implements part.Remover: delete removes the leases (their DHCP
// leases are released in AfterDelete).
func (p *Part) Remove(ctx context.Context, _ part.Op, in *part.Instance, r *revert.Reverter) error {
	if p.net == nil {
		return nil
	}
	for _, l := range p.leases(in.Spec) {
		if err := p.removeLease(ctx, r, in.Spec.Name, l); err != nil {
			return err
		}
	}
	return nil
}

// Defined implements part.Definer: a MAC the domain got outside hostctl
// is claimed (claimAdded), and the leases go from those of in.Old to
// those of in.Spec.
func (p *Part) Defined(ctx context.Context, _ part.Op, in *part.Instance, r *revert.Reverter) error {
	if err := p.claimAdded(ctx, r, in.Old, in.Spec); err != nil {
		return err
	}
	if p.net == nil {
		return nil
	}
	return p.syncLeases(ctx, r, in.Old, in.Spec)
}

// BeforeStart implements part.Starter: the leases go live.
func (p *Part) BeforeStart(ctx context.Context, in *part.Instance, r *revert.Reverter) error {
	if p.net == nil {
		return nil
	}
	return p.liveLeases(ctx, r, in.Spec)
}

// Devices implements part.Part: the NICs are listed with the domain's
// devices already.
func (*Part) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart implements part.Part.
func (*Part) AfterStart(context.Context, *part.Instance) error { return nil }

// AfterStop implements part.Part.
func (*Part) AfterStop(context.Context, *part.Instance) error { return nil }

// AfterDelete implements part.Part: the instance's record is gone (a
// delete, a force-delete from the store): the DHCP server's leases of
// the fixed addresses Remove took off this host's networks are released
// (best effort), and its MAC claims.
func (p *Part) AfterDelete(ctx context.Context, in *part.Instance) error {
	if p.net != nil {
		p.releaseLeases(ctx, in.Spec, nil)
	}
	return p.releaseAll(ctx, in.Spec)
}

// Committed implements part.Committer: once an apply stands, the DHCP
// server's leases of the fixed addresses it removed (a NIC dropped or
// given another MAC) are released (best effort).
func (p *Part) Committed(ctx context.Context, _ part.Op, in *part.Instance) []string {
	if p.net != nil {
		p.releaseLeases(ctx, in.Spec, p.leases(in.Spec))
	}
	return nil
}

// lease is a fixed DHCP host entry of a NIC on its libvirt network.
type lease struct {
	network, mac, ip string
}

func (l lease) String() string { return fmt.Sprintf("%s -> %s on network %s", l.mac, l.ip, l.network) }

// network is the libvirt network of a NIC.
func (p *Part) network(n model.NIC) string {
	if n.Network != "" {
		return n.Network
	}
	return p.defaultNetwork
}

// leases are the fixed DHCP leases of an instance, so that the metadata
// service knows a guest's source address before it boots:
//
//   - a NIC with a static IPv4 address (ips) gets its first one;
//   - the other NICs, in order, get the instance's IPv4 addresses
//     (addresses) that no NIC's static address takes, one each, skipping
//     loopback and link-local ones (never a DHCP address on a bridge).
//
// NICs left without an address get none (dnsmasq gives them one from its
// range; the operator must then list it in addresses).
func (p *Part) leases(in *model.Instance) []lease {
	if in == nil {
		return nil
	}
	static := make([]string, len(in.NICs))
	taken := map[string]bool{}
	for i, n := range in.NICs {
		if ip := firstStaticIPv4(n); ip != "" {
			static[i] = ip
			taken[ip] = true
		}
	}
	var pool []string
	for _, a := range in.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil || !ip.Is4() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || taken[ip.String()] {
			continue
		}
		pool = append(pool, ip.String())
	}
	var out []lease
	for i, n := range in.NICs {
		ip := static[i]
		if ip == "" && len(pool) > 0 {
			ip, pool = pool[0], pool[1:]
		}
		if ip == "" || n.MAC == "" {
			continue
		}
		out = append(out, lease{network: p.network(n), mac: strings.ToLower(n.MAC), ip: ip})
	}
	return out
}

func firstStaticIPv4(n model.NIC) string {
	for _, ipc := range n.IPs {
		if p, err := netip.ParsePrefix(ipc.Address); err == nil && p.Addr().Is4() {
			return p.Addr().String()
		}
	}
	return ""
}

// addStaticAddresses appends each NIC's static IPv4 address that the
// instance's addresses lack: the guest will call the metadata service from
// it, so the source-address index must know it before the guest boots.
func addStaticAddresses(in *model.Instance) {
	for _, n := range in.NICs {
		ip := firstStaticIPv4(n)
		if ip != "" && !slices.Contains(in.Addresses, ip) {
			in.Addresses = append(in.Addresses, ip)
		}
	}
}

// syncLeases makes the network's fixed leases go from those of old to
// those of new: leases only old has are removed, leases new has are added
// unless the network already has them; each change registers its undo.
func (p *Part) syncLeases(ctx context.Context, r *revert.Reverter, old, new *model.Instance) error {
	oldL, newL := p.leases(old), p.leases(new)
	name := ""
	if old != nil {
		name = old.Name
	}
	for _, l := range oldL {
		if slices.Contains(newL, l) {
			continue
		}
		if err := p.removeLease(ctx, r, name, l); err != nil {
			return err
		}
	}
	hosts := map[string][]virt.DHCPHost{}
	added := false // to a persistent definition only
	for _, l := range newL {
		hs, ok := hosts[l.network]
		if !ok {
			var err error
			if hs, err = p.net.DHCPHosts(ctx, l.network); err != nil {
				return fmt.Errorf("DHCP lease %s: %w", l, err)
			}
			hosts[l.network] = hs
		}
		if slices.ContainsFunc(hs, func(h virt.DHCPHost) bool { return h.MAC == l.mac && h.IP == l.ip }) {
			continue
		}
		add := p.net.AddDHCPHost
		if ld, ok := p.net.(LiveDHCP); ok {
			add = ld.AddDHCPHostConfig
			added = true
		}
		if err := add(ctx, l.network, virt.DHCPHost{MAC: l.mac, IP: l.ip}); err != nil {
			return fmt.Errorf("DHCP lease %s: %w", l, err)
		}
		r.Add("remove DHCP lease "+l.String(), func(ctx context.Context) error {
			return p.net.RemoveDHCPHost(ctx, l.network, l.mac)
		})
	}
	if added && new != nil {
		// A running guest may ask for its lease at any time: now, not at
		// its next start.
		if st, err := p.net.State(ctx, new.Name); err == nil && st != virt.StateShutoff {
			return p.liveLeases(ctx, r, new)
		}
	}
	return nil
}

// liveLeases brings the instance's fixed leases from the persistent
// definitions of their networks to the running networks (LiveDHCP), before
// its domain starts; a lease already live costs no update. A lease it
// brings live is registered on r to leave the running network again, so a
// start that fails changes nothing. Then a fixed address the network's
// DHCP server has leased to another MAC is reported (dhcpleases.go).
func (p *Part) liveLeases(ctx context.Context, r *revert.Reverter, in *model.Instance) error {
	byNet := map[string][]lease{}
	macs := map[string][]string{}
	var nets []string
	for _, l := range p.leases(in) {
		if _, ok := byNet[l.network]; !ok {
			nets = append(nets, l.network)
		}
		byNet[l.network] = append(byNet[l.network], l)
		macs[l.network] = append(macs[l.network], l.mac)
	}
	if ld, ok := p.net.(LiveDHCP); ok {
		if err := p.syncLive(ctx, r, in, ld, nets, macs); err != nil {
			return err
		}
	}
	p.reportLeasedElsewhere(ctx, in, nets, byNet)
	return nil
}

// syncLive is liveLeases' work on a LiveDHCP: the leases of macs (by
// network) go live on the running networks.
func (p *Part) syncLive(ctx context.Context, r *revert.Reverter, in *model.Instance, ld LiveDHCP, nets []string, macs map[string][]string) error {
	for _, n := range nets {
		before, err := ld.LiveDHCPHosts(ctx, n)
		if err != nil {
			return fmt.Errorf("DHCP leases of %s on network %s: %w", in.Name, n, err)
		}
		updates, err := ld.SyncLiveDHCPHosts(ctx, n, macs[n])
		if err != nil {
			return fmt.Errorf("DHCP leases of %s on network %s: %w", in.Name, n, err)
		}
		if updates == 0 {
			continue
		}
		for _, mac := range macs[n] {
			if slices.ContainsFunc(before, func(h virt.DHCPHost) bool { return strings.EqualFold(h.MAC, mac) }) {
				continue
			}
			r.Add("take DHCP lease of "+mac+" off the running network "+n, func(ctx context.Context) error {
				return ld.RemoveLiveDHCPHost(ctx, n, mac)
			})
		}
	}
	return nil
}

// removeLease removes a lease the network has, registering its re-adding;
// the DHCP server's lease of its address is released once the operation
// on instance name stands (pendRelease).
func (p *Part) removeLease(ctx context.Context, r *revert.Reverter, name string, l lease) error {
	hs, err := p.net.DHCPHosts(ctx, l.network)
	if err != nil {
		if errors.Is(err, virt.ErrNotFound) {
			return nil // the network is gone, and its leases with it
		}
		return fmt.Errorf("DHCP lease %s: %w", l, err)
	}
	i := slices.IndexFunc(hs, func(h virt.DHCPHost) bool { return h.MAC == l.mac })
	if i < 0 {
		return nil
	}
	h := hs[i]
	ld, split := p.net.(LiveDHCP)
	wasLive := false
	if split {
		live, err := ld.LiveDHCPHosts(ctx, l.network)
		if err != nil {
			return fmt.Errorf("DHCP lease %s: %w", l, err)
		}
		wasLive = slices.Contains(live, h)
	}
	if err := p.net.RemoveDHCPHost(ctx, l.network, l.mac); err != nil {
		return fmt.Errorf("remove DHCP lease %s: %w", l, err)
	}
	r.Add("restore DHCP lease "+l.String(), func(ctx context.Context) error {
		if !split {
			return p.net.AddDHCPHost(ctx, l.network, h)
		}
		// As it was: in the definition, and live if it was.
		if err := ld.AddDHCPHostConfig(ctx, l.network, h); err != nil {
			return err
		}
		if wasLive {
			_, err := ld.SyncLiveDHCPHosts(ctx, l.network, []string{l.mac})
			return err
		}
		return nil
	})
	p.pendRelease(name, l, r)
	return nil
}

// Moved implements part.Mover: the instance left this host (a migration
// confirmed here as its source, or reverted here as its destination), so
// its fixed DHCP entries leave this host's networks and their leases are
// released; the MAC claims are the store's and stay with the instance.
func (p *Part) Moved(ctx context.Context, _ part.Op, in *part.Instance) error {
	if p.net == nil {
		return nil
	}
	r := revert.New(p.log(), "release the DHCP entries of "+in.Spec.Name)
	for _, l := range p.leases(in.Spec) {
		if err := p.removeLease(ctx, r, in.Spec.Name, l); err != nil {
			return err
		}
	}
	r.Success()
	p.releaseLeases(ctx, in.Spec, nil)
	return nil
}
