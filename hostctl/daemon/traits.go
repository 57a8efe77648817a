package daemon

import (
	"slices"
	"strings"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
)

// creatableFormat checks one --ephemeral-encryption-formats value: only
// a format hostctl can create disks in is accepted (issue 20, item 6);
// the specification's other formats are refused, saying so.
func creatableFormat(f string) error {
	allowed := strings.Join(encryption.Creatable, ", ")
	switch {
	case slices.Contains(encryption.Creatable, f):
		return nil
	case slices.Contains(policy.Formats, f):
		return configErrorf("--ephemeral-encryption-formats: %q: hostctl cannot create disks in this format (qemu-img writes LUKS1 into qcow2 only); allowed: %s", f, allowed)
	default:
		return configErrorf("--ephemeral-encryption-formats: %q: not an encryption format; allowed: %s", f, allowed)
	}
}

// hostTraits are the COMPUTE_EPHEMERAL_ENCRYPTION traits this host
// reports, only where they are true: a host that makes no disk (no
// hypervisor, --virt none) has none; otherwise the formats the probe
// found, among those hostctl creates and this host is configured to use
// (--ephemeral-encryption-formats).
func hostTraits(hypervisor bool, s encryption.Support, formats []string) []string {
	if !hypervisor {
		return nil
	}
	return s.Only(encryption.Creatable...).Only(formats...).Traits()
}
