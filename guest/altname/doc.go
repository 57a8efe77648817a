// Package altname lists, adds and removes Linux alternative interface
// names (what `ip link property add dev ens3 altname db-net` does) over
// rtnetlink, without iproute2: RTM_GETLINK answers carry the names in
// IFLA_PROP_LIST/IFLA_ALT_IFNAME, RTM_NEWLINKPROP and RTM_DELLINKPROP
// change them (Linux 5.5 and later). An interface can then be named by
// any of its alternative names (`ip link show db-net`), which survive
// renames of the interface.
package altname

import "errors"

// Link is an interface and its alternative names.
type Link struct {
	Index    int
	Name     string
	AltNames []string
}

// ErrUnsupported is returned by kernels without alternative names (and
// on systems other than Linux).
var ErrUnsupported = errors.New("alternative interface names are not supported by this kernel (Linux 5.5 or later needed)")
