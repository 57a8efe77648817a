package devices

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vmeta/vmeta/internal/model"
)

// Found is a PCI device found in sysfs.
type Found struct {
	Address   string `json:"address"`
	VendorID  string `json:"vendor_id"`
	ProductID string `json:"product_id"`
	// Class is the 24-bit class code, six hex digits ("030200").
	Class string `json:"class"`
	// PF says the device is an SR-IOV physical function (it has
	// sriov_totalvfs); it is handed out whole, like type-PCI devices.
	PF bool `json:"pf,omitempty"`
}

// Discover lists the whole PCI devices under root (the sysfs mount, "/sys"
// on a host; a fixture tree in tests): every entry of
// root/bus/pci/devices whose vendor, device and class it can read,
// sorted by address. Like Nova's one-time-use support it leaves out
// SR-IOV virtual functions (a physfn link: they are not whole devices)
// and bridges (class 06xxxx: passing one through makes no sense).
func Discover(root string) ([]Found, error) {
	dir := filepath.Join(root, "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("discover PCI devices: %w", err)
	}
	var out []Found
	var errs []error
	for _, e := range entries {
		addr := e.Name()
		if !model.IsPCIAddress(addr) {
			continue // not a function of a PCI bus (sysfs has nothing else there)
		}
		p := filepath.Join(dir, addr)
		if _, err := os.Lstat(filepath.Join(p, "physfn")); err == nil {
			continue
		}
		d := Found{Address: addr}
		var rerr error
		read := func(name string) string {
			b, err := os.ReadFile(filepath.Join(p, name))
			if err != nil {
				rerr = errors.Join(rerr, err)
				return ""
			}
			return strings.TrimPrefix(strings.TrimSpace(string(b)), "0x")
		}
		d.VendorID, d.ProductID, d.Class = read("vendor"), read("device"), read("class")
		if rerr != nil {
			errs = append(errs, fmt.Errorf("device %s: %w", addr, rerr))
			continue
		}
		if strings.HasPrefix(d.Class, "06") {
			continue
		}
		if _, err := os.Stat(filepath.Join(p, "sriov_totalvfs")); err == nil {
			d.PF = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("device %s: %w", addr, err))
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	if len(errs) > 0 {
		return out, fmt.Errorf("discover PCI devices under %s: %w", root, errors.Join(errs...))
	}
	return out, nil
}
