package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
)

// ForceDeleteFromStore removes the record (and published metadata) of an
// instance whose host is gone, touching nothing else: that host's domain,
// disks, files and DHCP entries are out of this host's reach. It is
// refused while the owner's heartbeat is fresh, and for this host's own
// instances (use Delete). It returns what it could not clean.
func (o *adopter) ForceDeleteFromStore(ctx context.Context, name string) (_ []string, err error) {
	defer o.frame.Observe("force_delete", time.Now(), &err)
	defer o.frame.LockInstance(name)()
	rec, err := o.owners.Instance(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("delete %s from the store: %w", name, err)
	}
	if o.owners.Owns(rec) {
		return nil, fmt.Errorf("delete %s from the store: %w: it lives on this host (%s): use a plain delete, which cleans up here", name, controller.ErrState, o.owners.Host())
	}
	if err := o.owners.OwnerDown(ctx, "delete "+name+" from the store", rec); err != nil {
		return nil, err
	}
	if err := o.parts.CheckRecordParts(ctx, part.ForceDelete, rec); err != nil {
		return nil, err
	}
	if err := o.owners.Forget(ctx, rec); err != nil { // the parts that act on it, for its owner
		return nil, fmt.Errorf("delete %s from the store: %w", name, err)
	}
	left := []string{
		fmt.Sprintf("the domain %s, its disks and files on host %s (remove them there if the host comes back)", name, rec.Host),
		fmt.Sprintf("DHCP host entries of %s in host %s's libvirt network", name, rec.Host),
	}
	// The parts drop what they hold of it beyond its host (its share
	// mappings, its state record) and name what stays there.
	left = append(left, o.parts.CommittedRecordParts(ctx, part.ForceDelete, rec)...)
	o.log.Warn("instance record removed from the store by force; its host's resources stay", "name", name, "host", rec.Host)
	return left, nil
}
