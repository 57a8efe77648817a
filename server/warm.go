package server

import (
	"context"
	"net/netip"

	"github.com/vmeta/vmeta/internal/store"
)

// Warming (issue 23 item 3): the first request of a guest whose instance
// the server has not read yet costs a store read, a tree decode, checks
// and a directory build — a cold boot storm (every host restart, every
// replica start) paid that per guest on the boot path. The server instead
// reads the views ahead of the guests: the instances the store lists when
// Run starts (Options.WarmInstances of them), and an instance whenever it
// is published (Invalidate, the change feed). A warmed view has the
// directories cloud-init reads built (warmVersions), its rate-limit
// bucket made (the first request finds it in the view) and its source
// addresses mapped, as after a guest's first boot requests; what was not
// warmed (yet) is read on its first request, as before.

// DefaultWarmInstances bounds the instances read when Run starts.
const DefaultWarmInstances = 10000

// warmQueue is how many published instances may wait to be warmed;
// beyond it they are read on their first request.
const warmQueue = 1024

// warmVersions are the version directories a warmed view has built: the
// ones cloud-init's OpenStack reader (the newest version it knows, and
// latest) and EC2 reader (2009-04-04, latest) ask for.
var warmVersions = []int{
	int(osIndex["latest"]), int(osIndex["2018-08-27"]),
	int(ec2Index["2009-04-04"]), int(ec2Index["latest"]),
}

// instanceLister is a store that lists its instances (store.Store).
type instanceLister interface {
	Instances(ctx context.Context) ([]store.Instance, error)
}

// warmSoon asks Run's warmer to read an instance's view (it was just
// published); a full queue drops the request (the first request reads it).
func (s *Server) warmSoon(uuid string, addrs []string) {
	select {
	case s.warmQ <- warmItem{uuid: uuid, addrs: addrs}:
	default:
	}
}

type warmItem struct {
	uuid  string
	addrs []string
}

// warmer reads the views of the listed instances (at most n), then those
// warmSoon asks for, until ctx is done.
func (s *Server) warmer(ctx context.Context, n int) {
	if l, ok := s.docs.(instanceLister); ok && n > 0 {
		recs, err := l.Instances(ctx)
		if err != nil {
			s.log.Debug("warm the cache: list instances", "err", err)
		}
		for i, rec := range recs {
			if i == n || ctx.Err() != nil {
				break
			}
			s.warm(ctx, rec.UUID, rec.Addresses)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-s.warmQ:
			s.warm(ctx, it.uuid, it.addrs)
		}
	}
}

// warm reads an instance's view into the cache, builds the directories
// cloud-init asks for, and maps the addresses the store's index gives the
// instance. Errors are left to the first request to meet.
func (s *Server) warm(ctx context.Context, uuid string, addrs []string) {
	if uuid == "" {
		return
	}
	v, err := s.fillUUID(ctx, uuid)
	if err != nil {
		s.log.Debug("warm the cache", "uuid", uuid, "err", err)
		return
	}
	if err := v.prebuild(warmVersions...); err != nil {
		s.log.Debug("warm the cache", "uuid", uuid, "err", err)
		return
	}
	if s.limiter != nil && v.bucket.Load() == nil {
		v.bucket.Store(s.limiter.bucketOf(uuid, s.now()))
	}
	for _, addr := range addrs {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			continue
		}
		// Through the store's index, as a request would: an address
		// another instance holds maps to that one's view, if cached.
		if _, err := s.fillAddr(ctx, a.Unmap().WithZone("")); err != nil {
			s.log.Debug("warm the cache", "uuid", uuid, "address", addr, "err", err)
		}
	}
}
