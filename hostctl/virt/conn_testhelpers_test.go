package virt

// Conn methods only the tests use: the product goes through Lookup,
// Remove, DetachDevice and the reconnect loop instead.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// lookupUUID finds a domain by UUID.
func (c *Conn) lookupUUID(ctx context.Context, uuid string) (Domain, error) {
	u, err := parseUUID(uuid)
	if err != nil {
		return Domain{}, fmt.Errorf("look up domain %s: %w", uuid, err)
	}
	var d libvirt.Domain
	err = c.call(ctx, "look up", "domain "+uuid, func(l *libvirt.Libvirt) (err error) {
		d, err = l.DomainLookupByUUID(u)
		return err
	})
	return toDomain(d), err
}

// undefine removes a domain's definition (a running domain keeps running
// as a transient one until destroyed).
func (c *Conn) undefine(ctx context.Context, name string) error {
	return c.withDomain(ctx, "undefine", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		return l.DomainUndefineFlags(d, undefineFlags)
	})
}

// detachAlias removes the device with the given alias (DiskAlias,
// NICAlias, ShareAlias), with DetachDevice's asynchronous semantics.
func (c *Conn) detachAlias(ctx context.Context, name, alias string, affect Affect) error {
	return c.withDomain(ctx, "detach device "+alias+" ("+affect.String()+") from", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		return l.DomainDetachDeviceAlias(d, alias, uint32(affect))
	})
}

// connected reports whether the connection is up right now.
func (c *Conn) connected() bool {
	_, err := c.client()
	return err == nil
}

// waitConnected waits until the connection is up or ctx ends.
func (c *Conn) waitConnected(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := c.client(); err == nil || errors.Is(err, ErrClosed) {
			return err
		}
		select {
		case <-ctx.Done():
			_, err := c.client()
			return fmt.Errorf("wait for libvirtd: %w (%w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

func parseUUID(s string) (libvirt.UUID, error) {
	var u libvirt.UUID
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != len(u) {
		return u, fmt.Errorf("%q is not a UUID", s)
	}
	copy(u[:], b)
	return u, nil
}
