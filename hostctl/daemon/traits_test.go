package daemon

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/encryption"
)

// TestEphemeralEncryptionFormatsFlag (issue 20, item 6): the flag accepts
// only the formats hostctl can create (luks); luksv2 and plain, which
// qemu-img cannot make, are refused naming the flag, the value and the
// allowed values, as is an unknown format.
func TestEphemeralEncryptionFormatsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" accepted
	}{
		{nil, ""},
		{[]string{"--ephemeral-encryption-formats", "luks"}, ""},
		{[]string{"--ephemeral-encryption-formats", "luks,luksv2"}, `--ephemeral-encryption-formats: "luksv2": hostctl cannot create`},
		{[]string{"--ephemeral-encryption-formats", "plain"}, `--ephemeral-encryption-formats: "plain": hostctl cannot create`},
		{[]string{"--ephemeral-encryption-formats", "rot13"}, `--ephemeral-encryption-formats: "rot13": not an encryption format`},
		{[]string{"--ephemeral-encryption-formats", ","}, "at least one format"},
	} {
		var cfg Config
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		cfg.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		h, err := cfg.encryptionHost()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want == "" && !slices.Equal(h.Formats, []string{"luks"}):
			t.Errorf("%v: formats %v", tc.args, h.Formats)
		case tc.want != "" && (err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), "allowed: luks") && !strings.Contains(tc.want, "at least")):
			t.Errorf("%v = %v, want a configuration error naming %q and the allowed values", tc.args, err, tc.want)
		}
	}
}

// TestHostTraits (issue 20, item 6): the encryption traits are reported
// only where true: none without a hypervisor (no disk is made), none for
// a format the probe did not find or the host is not configured for.
func TestHostTraits(t *testing.T) {
	luks := encryption.Support{Formats: []string{"luks", "luksv2"}}
	for _, tc := range []struct {
		name       string
		hypervisor bool
		s          encryption.Support
		formats    []string
		want       []string
	}{
		{"--virt none", false, luks, []string{"luks"}, nil},
		{"libvirt, luks found", true, luks, []string{"luks"}, []string{encryption.TraitEphemeralEncryption, encryption.TraitLUKS}},
		{"libvirt, the probe found nothing", true, encryption.Support{}, []string{"luks"}, nil},
		{"libvirt, luks not configured", true, luks, nil, nil},
	} {
		if got := hostTraits(tc.hypervisor, tc.s, tc.formats); !slices.Equal(got, tc.want) {
			t.Errorf("%s: traits %v, want %v", tc.name, got, tc.want)
		}
	}
}
