// Package devices is hostctl's inventory of passthrough PCI devices, with
// one-time-use devices (Nova's "one-time-use devices" spec): a device a
// tenant used is never handed to the next tenant until an operator says
// it is clean.
//
// The operator's device spec (hostctl serve --device-spec FILE; Spec)
// matches the host's PCI devices, found in sysfs (Discover, under a
// configurable root), by address glob or vendor/product id and gives them
// an alias that instance specs request (pci_aliases). Each matched whole
// device has one record in the store, placement style: total 1,
// reserved, used, traits (HW_PCI_ONE_TIME_USE on one-time-use devices),
// its host and a generation (the record's version). A device an instance
// spec names directly in pci_devices with one_time_use gets a record too
// when first claimed (no alias, not present: no alias claim takes it). A
// host's records are
// one store group (store.Groups: one bbolt transaction, or one Redis hash
// in one slot), so every change below is one atomic compare-and-swap.
//
// The rules, each an invariant the tests check under concurrency and
// crashes:
//
//   - Claim and burn are one write: a claimed one-time-use device gets
//     used = 1 and reserved = total in the same compare-and-swap, before
//     the domain that uses it is defined or started. A crash after it
//     leaves the device burned; ReleaseOrphans at the next start gives it
//     back as "needs cleaning", never as free.
//   - An instance keeps its devices while it exists. Apply claims (the
//     domain is defined with the device's <hostdev>), and the instance
//     holds the device while stopped, running, in ERROR and after any
//     start that fails (a share mount failure, libvirt refusing the
//     domain, each hard reboot in ERROR): the retry uses the same device,
//     so failed starts never drain the pool (hostctl/controller,
//     devicestart.go). Release — the instance deleted or moved away, the
//     apply that claimed it for a new instance failed, or a re-apply no
//     longer asking for it — sets used = 0 and never lowers reserved. A
//     released burned device emits device.released on the "devices" event
//     stream and runs the cleanup hook (Hook): in the background, with a
//     timeout, once.
//   - A device needs cleaning by its counters alone (total = reserved,
//     used = 0), as the specification defines it: one burned while
//     one-time-use still needs cleaning after the operator un-marks it.
//   - Only Clean (the operator: hostctl device clean ADDR) lowers reserved,
//     to 0, and only while the device is not in use.
//   - Sync (at start and every --device-sync-interval, with the spec file
//     read again) heals a device marked one-time-use while allocated into
//     reserved = total. Hostctl never lowers a reserved value.
//   - A device of the device spec can reach an instance only through
//     pci_aliases (an explicit pci_devices address of one is refused), so
//     nothing bypasses the burn. A direct pci_devices entry (a device
//     outside the spec) marked one_time_use is claimed and burned like an
//     alias claim (ClaimDevices, in the same write); a direct entry naming
//     a device held by another instance, or burned awaiting cleaning, is
//     refused; without an inventory the controller refuses the field.
//   - Lists filter only by a trait vmeta sets (Traits); another is
//     refused, not answered with an empty list.
//   - Nothing about burning reaches the guest. A device reaches the
//     guest's device metadata only when the spec tags it (pci_devices
//     tag, or a pci_aliases request's tag), as a "pci" device with its
//     guest address (internal/metadata, schema device-role-tagging 1.2).
//
// Lifecycle: rebuild keeps the device (Claim is idempotent per instance).
// vmeta has no move operations yet; when they come:
//
//   - evacuate: the device on the failed host stays burned (its record is
//     released when that host deletes the instance); the destination claims
//     and burns a new device before the instance starts there, failing
//     before it assigns anything if none is free. vmeta's nearest operation
//     already works so: after `hostctl instance adopt`, the next apply on
//     the adopting host drops the old host's pci_devices entries and claims
//     from its own inventory, and the old host, when it starts again,
//     releases its claim (the instance is no longer its own) as burned;
//   - cold migration and resize: the destination's device is claimed and
//     burned when the instance starts there (the verify state); on confirm
//     the source's stays burned; on revert the destination's stays burned —
//     a revert never un-burns;
//   - live migration (only of live_migratable devices): the destination's
//     device is burned in the migration, the source's stays burned.
//
// Events are emitted after the write they describe commits: a crash in
// between loses the event, never the burn. Cleanup workflows must
// therefore also poll hostctl device list --needs-cleaning, as Nova's
// documentation says of its notifications.
package devices
