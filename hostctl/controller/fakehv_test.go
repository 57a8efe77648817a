package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/vmeta/vmeta/hostctl/virt"
)

// fakeHV is an in-memory libvirt: domains are their XML (as BuildDomain
// writes it, with addresses filled in the way libvirt's qemu driver does
// at define and attach time: a PCI bus per virtio device, drive units per
// SCSI/SATA bus), networks are lists of DHCP hosts. failAt makes the n-th
// call (counting every method, 1-based) fail once, for fault injection.
type fakeHV struct {
	mu      sync.Mutex
	domains map[string]*fakeDomain
	nets    map[string][]virt.DHCPHost
	// live are the running networks' leases where they differ from nets
	// (dhcplive_test.go): AddDHCPHostConfig leaves them behind.
	live    map[string][]virt.DHCPHost
	calls   []string
	failAt  int
	nextBus int
	events  chan virt.Event
	updates []fakeUpdate
	// failStarts is how many of the next Start calls fail (as QEMU does
	// when a hostdev's device cannot be assigned).
	failStarts int
	// secrets are the libvirt secrets (encryption_test.go), by UUID.
	secrets map[string]fakeSecret
}

type fakeDomain struct {
	xml     string
	uuid    string
	running bool
	// media are the cdrom media of the running domain that differ from
	// its definition (target -> source), as a live-only update-device
	// leaves them; XML(live) shows them, and they go when it stops.
	media map[string]string
}

// fakeUpdate is one UpdateDevice call that succeeded.
type fakeUpdate struct {
	domain, target, source string
	affect                 virt.Affect
}

var errInjected = errors.New("injected failure")

func newFakeHV() *fakeHV {
	return &fakeHV{domains: map[string]*fakeDomain{}, nets: map[string][]virt.DHCPHost{"default": nil}, nextBus: 0x10}
}

// call records a call and returns the injected failure if it is due.
func (f *fakeHV) call(op string) error {
	f.calls = append(f.calls, op)
	if f.failAt == len(f.calls) {
		return fmt.Errorf("%s: %w", op, errInjected)
	}
	return nil
}

func notFound(what string) error {
	return fmt.Errorf("%s: %w", what, virt.ErrNotFound)
}

func (f *fakeHV) List(ctx context.Context) ([]virt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("List"); err != nil {
		return nil, err
	}
	var out []virt.Domain
	for name, d := range f.domains {
		id := int32(-1)
		if d.running {
			id = 1
		}
		out = append(out, virt.Domain{Name: name, UUID: d.uuid, ID: id})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

var (
	reName        = regexp.MustCompile(`<name>([^<]*)</name>`)
	reUUID        = regexp.MustCompile(`<uuid>([^<]*)</uuid>`)
	reDiskBlk     = regexp.MustCompile(`(?s)<disk [^>]*>.*?</disk>`)
	reHostdevBlk  = regexp.MustCompile(`(?s)<hostdev [^>]*>.*?</hostdev>`)
	reHostdevSrc  = regexp.MustCompile(`<address domain="[^"]*" bus="[^"]*" slot="[^"]*" function="[^"]*"`)
	reNICBlk      = regexp.MustCompile(`(?s)<interface [^>]*>.*?</interface>`)
	reTarget      = regexp.MustCompile(`<target dev="([^"]+)" bus="([^"]+)"`)
	reMACAttr     = regexp.MustCompile(`<mac address="([^"]+)"`)
	reBetweenTags = regexp.MustCompile(`>\s+<`)
	reAddrUnits   = regexp.MustCompile(`<address type="drive" controller="(\d+)" bus="(\d+)" target="(\d+)" unit="(\d+)"`)
	reSourceFile  = regexp.MustCompile(`<source file="([^"]*)"`)
)

// addresses fills in the address of every device block lacking one.
func (f *fakeHV) addresses(doc string) string {
	units := map[string][]int{}
	for _, b := range reDiskBlk.FindAllString(doc, -1) {
		t := reTarget.FindStringSubmatch(b)
		if m := reAddrUnits.FindStringSubmatch(b); m != nil && t != nil {
			var u int
			fmt.Sscan(m[4], &u)
			units[t[2]] = append(units[t[2]], u)
		}
	}
	pci := func() string {
		f.nextBus++
		return fmt.Sprintf(`<address type="pci" domain="0x0000" bus="0x%02x" slot="0x00" function="0x0"></address>`, f.nextBus)
	}
	doc = reDiskBlk.ReplaceAllStringFunc(doc, func(b string) string {
		if strings.Contains(b, "<address") {
			return b
		}
		t := reTarget.FindStringSubmatch(b)
		addr := ""
		if t[2] == "virtio" {
			addr = pci()
		} else {
			u := 0
			for slices.Contains(units[t[2]], u) {
				u++
			}
			units[t[2]] = append(units[t[2]], u)
			addr = fmt.Sprintf(`<address type="drive" controller="0" bus="0" target="0" unit="%d"></address>`, u)
		}
		return strings.Replace(b, "</disk>", addr+"</disk>", 1)
	})
	return reNICBlk.ReplaceAllStringFunc(doc, func(b string) string {
		if strings.Contains(b, "<address") {
			return b
		}
		return strings.Replace(b, "</interface>", pci()+"</interface>", 1)
	})
}

func (f *fakeHV) Define(ctx context.Context, domainXML []byte) (virt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Define"); err != nil {
		return virt.Domain{}, err
	}
	doc := string(domainXML)
	name, uuid := reName.FindStringSubmatch(doc)[1], reUUID.FindStringSubmatch(doc)[1]
	d := f.domains[name]
	if d == nil {
		d = &fakeDomain{}
		f.domains[name] = d
	}
	d.xml, d.uuid = f.addresses(doc), uuid
	f.emit(virt.Event{Kind: virt.EventDefined, Domain: name, UUID: uuid})
	return virt.Domain{Name: name, UUID: uuid, ID: -1}, nil
}

func (f *fakeHV) emit(ev virt.Event) {
	if f.events != nil {
		f.events <- ev
	}
}

func (f *fakeHV) Remove(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Remove"); err != nil {
		return err
	}
	delete(f.domains, name)
	return nil
}

func (f *fakeHV) withDomain(op, name string, fn func(d *fakeDomain) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(op); err != nil {
		return err
	}
	d, ok := f.domains[name]
	if !ok {
		return notFound(op + " domain " + name)
	}
	return fn(d)
}

func (f *fakeHV) Start(ctx context.Context, name string) error {
	return f.withDomain("Start", name, func(d *fakeDomain) error {
		if d.running {
			return errors.New("domain is already running")
		}
		if f.failStarts > 0 {
			f.failStarts--
			return fmt.Errorf("start: %w", errInjected)
		}
		d.running = true
		return nil
	})
}

// Shutdown is ignored, as by a guest without ACPI support.
func (f *fakeHV) Shutdown(ctx context.Context, name string) error {
	return f.withDomain("Shutdown", name, func(d *fakeDomain) error { return nil })
}

func (f *fakeHV) Destroy(ctx context.Context, name string) error {
	return f.withDomain("Destroy", name, func(d *fakeDomain) error {
		if !d.running {
			return errors.New("domain is not running")
		}
		d.running, d.media = false, nil
		return nil
	})
}

func (f *fakeHV) State(ctx context.Context, name string) (virt.State, error) {
	st := virt.StateShutoff
	err := f.withDomain("State", name, func(d *fakeDomain) error {
		if d.running {
			st = virt.StateRunning
		}
		return nil
	})
	return st, err
}

func (f *fakeHV) XML(ctx context.Context, name string, live bool) ([]byte, error) {
	var out []byte
	err := f.withDomain("XML", name, func(d *fakeDomain) error {
		doc := d.xml
		if live && d.running && len(d.media) > 0 {
			doc = reDiskBlk.ReplaceAllStringFunc(doc, func(b string) string {
				t := reTarget.FindStringSubmatch(b)
				if src, ok := d.media[t[1]]; ok {
					return reSourceFile.ReplaceAllLiteralString(b, `<source file="`+src+`"`)
				}
				return b
			})
		}
		out = []byte(doc)
		return nil
	})
	return out, err
}

// UpdateDevice changes the medium of a cdrom of the running domain, as
// libvirt does for a live update-device of a cdrom: the new medium must
// exist, only the source may differ.
func (f *fakeHV) UpdateDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error {
	return f.withDomain("UpdateDevice", name, func(d *fakeDomain) error {
		if affect&virt.AffectLive == 0 || affect&virt.AffectConfig != 0 {
			return fmt.Errorf("the fake changes media of running domains only (affect %s)", affect)
		}
		if !d.running {
			return errors.New("domain is not running")
		}
		dev := string(deviceXML)
		t, src := reTarget.FindStringSubmatch(dev), reSourceFile.FindStringSubmatch(dev)
		if t == nil || src == nil || !strings.Contains(dev, `device="cdrom"`) {
			return fmt.Errorf("not a cdrom with a medium:\n%s", dev)
		}
		var block string
		for _, b := range reDiskBlk.FindAllString(d.xml, -1) {
			if strings.Contains(b, `<target dev="`+t[1]+`" bus="`+t[2]+`"`) {
				block = b
			}
		}
		if block == "" || !strings.Contains(block, `device="cdrom"`) {
			return fmt.Errorf("no cdrom %s", t[1])
		}
		if _, err := os.Stat(src[1]); err != nil {
			return fmt.Errorf("cannot open the new medium: %w", err)
		}
		if reSourceFile.FindStringSubmatch(block)[1] == src[1] {
			delete(d.media, t[1])
		} else {
			if d.media == nil {
				d.media = map[string]string{}
			}
			d.media[t[1]] = src[1]
		}
		f.updates = append(f.updates, fakeUpdate{domain: name, target: t[1], source: src[1], affect: affect})
		return nil
	})
}

func (f *fakeHV) AttachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error {
	return f.withDomain("AttachDevice", name, func(d *fakeDomain) error {
		if affect&virt.AffectLive != 0 && !d.running {
			return errors.New("domain is not running")
		}
		dev := string(deviceXML)
		if t := reTarget.FindStringSubmatch(dev); t != nil && strings.Contains(d.xml, `<target dev="`+t[1]+`"`) {
			return fmt.Errorf("target %s already exists", t[1])
		}
		d.xml = f.addresses(strings.Replace(d.xml, "</devices>", dev+"\n</devices>", 1))
		return nil
	})
}

func (f *fakeHV) DetachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error {
	return f.withDomain("DetachDevice", name, func(d *fakeDomain) error {
		dev := string(deviceXML)
		var re *regexp.Regexp
		var key string
		if t := reTarget.FindStringSubmatch(dev); t != nil {
			re, key = reDiskBlk, `<target dev="`+t[1]+`"`
		} else if m := reMACAttr.FindStringSubmatch(dev); m != nil {
			re, key = reNICBlk, `<mac address="`+m[1]+`"`
		} else if m := reHostdevSrc.FindStringSubmatch(dev); m != nil {
			re, key = reHostdevBlk, m[0]
		} else {
			return errors.New("device not found")
		}
		found := false
		d.xml = re.ReplaceAllStringFunc(d.xml, func(b string) string {
			if strings.Contains(b, key) {
				found = true
				return ""
			}
			return b
		})
		if !found {
			return errors.New("device not found")
		}
		return nil
	})
}

func (f *fakeHV) DHCPHosts(ctx context.Context, network string) ([]virt.DHCPHost, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("DHCPHosts"); err != nil {
		return nil, err
	}
	hs, ok := f.nets[network]
	if !ok {
		return nil, notFound("network " + network)
	}
	return slices.Clone(hs), nil
}

func (f *fakeHV) AddDHCPHost(ctx context.Context, network string, h virt.DHCPHost) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("AddDHCPHost"); err != nil {
		return err
	}
	hs, ok := f.nets[network]
	if !ok {
		return notFound("network " + network)
	}
	for _, e := range hs {
		if e == h {
			return nil
		}
		if e.MAC == h.MAC || e.IP == h.IP {
			return fmt.Errorf("%w: the network has host %s -> %s", virt.ErrConflict, e.MAC, e.IP)
		}
	}
	f.nets[network] = append(hs, h)
	f.addLive(network, h)
	return nil
}

func (f *fakeHV) RemoveDHCPHost(ctx context.Context, network, mac string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("RemoveDHCPHost"); err != nil {
		return err
	}
	f.nets[network] = slices.DeleteFunc(f.nets[network], func(h virt.DHCPHost) bool { return h.MAC == mac })
	if f.live != nil {
		f.live[network] = slices.DeleteFunc(f.live[network], func(h virt.DHCPHost) bool { return h.MAC == mac })
	}
	return nil
}

func (f *fakeHV) Events() <-chan virt.Event {
	if f.events == nil {
		return nil
	}
	return f.events
}

// snapshot is the fake's whole state, for "nothing changed" checks.
func (f *fakeHV) snapshot() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	names := make([]string, 0, len(f.domains))
	for n := range f.domains {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := f.domains[n]
		fmt.Fprintf(&b, "domain %s %s running=%t media=%v\n%s\n", n, d.uuid, d.running, d.media, normalizeXML(d.xml))
	}
	nets := make([]string, 0, len(f.nets))
	for n := range f.nets {
		nets = append(nets, n)
	}
	sort.Strings(nets)
	for _, n := range nets {
		hs := slices.Clone(f.nets[n])
		sort.Slice(hs, func(i, j int) bool { return hs[i].MAC < hs[j].MAC })
		fmt.Fprintf(&b, "network %s %v\n", n, hs)
		if lv := slices.Clone(f.live[n]); len(lv) > 0 {
			sort.Slice(lv, func(i, j int) bool { return lv[i].MAC < lv[j].MAC })
			fmt.Fprintf(&b, "network %s live %v\n", n, lv)
		}
	}
	ids := make([]string, 0, len(f.secrets))
	for id := range f.secrets {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintf(&b, "libvirt secret %s %s\n", id, f.secrets[id].Usage)
	}
	return b.String()
}

// normalizeXML collapses whitespace and lists the disk and interface
// blocks sorted, one per line: a detach undone by attaching the device
// again (at its address) moves it to the end of the XML, as libvirt does,
// which changes nothing the guest or the metadata can tell.
func normalizeXML(s string) string {
	var blocks []string
	for _, re := range []*regexp.Regexp{reDiskBlk, reNICBlk} {
		blocks = append(blocks, re.FindAllString(s, -1)...)
		s = re.ReplaceAllString(s, "")
	}
	for i, b := range blocks {
		blocks[i] = reBetweenTags.ReplaceAllString(b, "><")
	}
	sort.Strings(blocks)
	return strings.Join(strings.Fields(s), " ") + "\n" + strings.Join(blocks, "\n")
}

func (f *fakeHV) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeHV) setFailAt(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAt = n
}

// removeDeviceBehindBack drops a disk (by target) or NIC (by MAC) as
// `virsh detach-device` would, without telling hostctl.
func (f *fakeHV) removeDeviceBehindBack(name, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.domains[name]
	for _, re := range []*regexp.Regexp{reDiskBlk, reNICBlk} {
		d.xml = re.ReplaceAllStringFunc(d.xml, func(b string) string {
			if strings.Contains(b, `"`+key+`"`) {
				return ""
			}
			return b
		})
	}
}
