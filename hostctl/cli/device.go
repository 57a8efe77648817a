package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// deviceCommands are `hostctl device list|show|clean`: the operator's side
// of the passthrough device inventory and its one-time-use devices.
func deviceCommands() []*Command {
	return []*Command{
		{Name: "device list", Summary: "list the passthrough device inventory (--needs-cleaning, --trait T, --all-hosts)", Client: true, Setup: deviceList,
			Help: "A device needs cleaning when reserved == total and used == 0 (the counters alone, whatever its traits):\n" +
				"an instance used it while it was one-time-use (trait HW_PCI_ONE_TIME_USE), and it stays out of the pool\n" +
				"until `hostctl device clean ADDR`. --trait takes only a trait vmeta sets: HW_PCI_ONE_TIME_USE."},
		{Name: "device show", Args: "ADDR", Summary: "show one device of this host (counters, traits, last use, cleanup hook outcome)", Client: true, Setup: noFlags(deviceShow)},
		{Name: "device clean", Args: "ADDR", Summary: "say a device is clean: reserved back to 0, so it rejoins the pool (refused while in use)", Client: true, Setup: noFlags(deviceClean)},
	}
}

func deviceList(fs *flag.FlagSet) func(context.Context, *Call) error {
	nc := fs.Bool("needs-cleaning", false, "only devices released burned and awaiting cleaning (reserved == total, used == 0)")
	trait := fs.String("trait", "", "only devices with this trait (vmeta sets only HW_PCI_ONE_TIME_USE)")
	all := fs.Bool("all-hosts", false, "every host's devices, not only this host's")
	return func(ctx context.Context, c *Call) error {
		if err := c.NoArgs(); err != nil {
			return err
		}
		list, err := c.Client().Devices(ctx, *nc, *trait, *all)
		if err != nil {
			return err
		}
		return printList(c, types.DeviceList{Devices: list}, "HOST\tADDRESS\tALIAS\tVENDOR:PRODUCT\tTOTAL\tRESERVED\tUSED\tSTATE\tINSTANCE\tTRAITS", list, func(d types.Device) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s", d.Host, d.Address, orDash(d.Alias), deviceIDs(d),
				d.Total, d.Reserved, d.Used, deviceState(d), orDash(d.ConsumerName), orDash(strings.Join(d.Traits, ",")))
		})
	}
}

// deviceIDs is vendor:product, or - when unknown (a device named
// directly in pci_devices that no sync has found in sysfs).
func deviceIDs(d types.Device) string {
	if d.VendorID == "" && d.ProductID == "" {
		return "-"
	}
	return d.VendorID + ":" + d.ProductID
}

// deviceState says in a word where a device stands.
func deviceState(d types.Device) string {
	switch {
	case d.Used > 0:
		return "in-use"
	case d.NeedsCleaning:
		return "needs-cleaning"
	case !d.Present:
		return "not-present"
	case d.Reserved >= d.Total:
		return "reserved"
	}
	return "free"
}

func deviceShow(ctx context.Context, c *Call) error {
	addr, err := c.OneName()
	if err != nil {
		return err
	}
	d, err := c.Client().Device(ctx, addr)
	if err != nil {
		return err
	}
	return printDevice(c, d)
}

func deviceClean(ctx context.Context, c *Call) error {
	addr, err := c.OneName()
	if err != nil {
		return err
	}
	d, err := c.Client().CleanDevice(ctx, addr)
	if err != nil {
		return err
	}
	if c.JSON() {
		return c.PrintJSON(d)
	}
	if d.Alias == "" {
		// Named directly in an instance's pci_devices, outside the device spec.
		fmt.Fprintf(c.Stdout, "device %s is clean: reserved %d, usable again in pci_devices\n", d.Address, d.Reserved)
		return nil
	}
	fmt.Fprintf(c.Stdout, "device %s is clean: reserved %d, back in the pool of alias %s\n", d.Address, d.Reserved, d.Alias)
	return nil
}

func printDevice(c *Call, d types.Device) error {
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	hook := "-"
	if h := d.LastCleanupHook; h != nil {
		hook = h.Outcome + " at " + h.At.UTC().Format(time.RFC3339)
		if h.Message != "" {
			hook += ": " + h.Message
		}
	}
	return printFields(c, d, [][2]string{
		{"Address", d.Address}, {"Host", d.Host}, {"Alias", orDash(d.Alias)},
		{"Vendor:product", deviceIDs(d)}, {"Class", orDash(d.Class)},
		{"State", deviceState(d)},
		{"Total/reserved/used", fmt.Sprintf("%d/%d/%d", d.Total, d.Reserved, d.Used)},
		{"Traits", orDash(strings.Join(d.Traits, ","))},
		{"One-time-use", fmt.Sprint(d.OneTimeUse)}, {"Live-migratable", fmt.Sprint(d.LiveMigratable)},
		{"Instance", orDash(d.ConsumerName)}, {"Burned", ts(d.BurnedAt)}, {"Released", ts(d.ReleasedAt)},
		{"Cleaned", ts(d.CleanedAt)}, {"Cleanup hook", hook}, {"Generation", fmt.Sprint(d.Generation)},
	})
}
