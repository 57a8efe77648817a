package virt

import (
	"context"
	"encoding/xml"
	"fmt"
	"slices"

	"github.com/digitalocean/go-libvirt"
)

// ShareSupport is what a host's libvirt can do for virtiofs shares (Nova's
// COMPUTE_STORAGE_VIRTIO_FS and COMPUTE_MEM_BACKING_FILE traits, read
// from libvirt's domain capabilities).
type ShareSupport struct {
	// Virtiofs: <filesystem> offers driverType virtiofs.
	Virtiofs bool
	// SharedMemory: <memoryBacking> offers sourceType memfd (what
	// BuildDomain gives a domain with shares).
	SharedMemory bool
}

// Check returns nil when both are there, else an error naming what is
// missing.
func (s ShareSupport) Check() error {
	switch {
	case !s.Virtiofs:
		return fmt.Errorf("this host's libvirt offers no virtiofs filesystem driver (domain capabilities)")
	case !s.SharedMemory:
		return fmt.Errorf("this host cannot share guest memory: libvirt's domain capabilities list no memfd memory backing, which virtiofs needs")
	}
	return nil
}

type domainCapsXML struct {
	MemoryBacking struct {
		Supported string    `xml:"supported,attr"`
		Enums     []enumXML `xml:"enum"`
	} `xml:"memoryBacking"`
	Filesystem struct {
		Supported string    `xml:"supported,attr"`
		Enums     []enumXML `xml:"enum"`
	} `xml:"devices>filesystem"`
}

type enumXML struct {
	Name   string   `xml:"name,attr"`
	Values []string `xml:"value"`
}

func hasValue(enums []enumXML, name, v string) bool {
	for _, e := range enums {
		if e.Name == name && slices.Contains(e.Values, v) {
			return true
		}
	}
	return false
}

// ParseShareSupport reads ShareSupport from domain capabilities XML.
func ParseShareSupport(doc []byte) (ShareSupport, error) {
	var x domainCapsXML
	if err := xml.Unmarshal(doc, &x); err != nil {
		return ShareSupport{}, fmt.Errorf("parse domain capabilities: %w", err)
	}
	return ShareSupport{
		Virtiofs:     x.Filesystem.Supported == "yes" && hasValue(x.Filesystem.Enums, "driverType", "virtiofs"),
		SharedMemory: x.MemoryBacking.Supported == "yes" && hasValue(x.MemoryBacking.Enums, "sourceType", "memfd"),
	}, nil
}

// ShareSupport asks libvirt what it can do for virtiofs shares on
// domains of the given type and machine (qemu/tcg or kvm; q35 when empty).
func (c *Conn) ShareSupport(ctx context.Context, typ DomainType, machine string) (ShareSupport, error) {
	if typ == "" {
		typ = TypeQEMU
	}
	if machine == "" {
		machine = MachineQ35
	}
	var doc string
	err := c.call(ctx, "get", "domain capabilities", func(l *libvirt.Libvirt) (err error) {
		doc, err = l.ConnectGetDomainCapabilities(nil, libvirt.OptString{"x86_64"}, libvirt.OptString{machine}, libvirt.OptString{string(typ)}, 0)
		return err
	})
	if err != nil {
		return ShareSupport{}, err
	}
	return ParseShareSupport([]byte(doc))
}
