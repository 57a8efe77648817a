package sysfs

import (
	"regexp"
	"slices"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
)

// TestIsPCIAddressAgreesWithModel: the agent's own check of a PCI
// function name accepts exactly what model.IsPCIAddress (the host's, which
// the agent no longer links) accepts.
func TestIsPCIAddressAgreesWithModel(t *testing.T) {
	for _, s := range []string{"0000:00:02.0", "ffff:ff:1f.7", "0000:00:02.8", "0000:00:02.a", "0000:00:02", "0000:00:02.00",
		"000g:00:02.0", "0000:0A:02.0", "0000-00:02.0", "0000:00-02.0", "0000:00:02-0", "", "virtio0", "pci0000:00", "0000:00:1f.7\n"} {
		if got, want := isPCIAddress(s), model.IsPCIAddress(s); got != want {
			t.Errorf("isPCIAddress(%q) = %v, model says %v", s, got, want)
		}
	}
}

func FuzzIsPCIAddress(f *testing.F) {
	f.Add("0000:00:02.0")
	f.Add("0000:00:02.9")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isPCIAddress(s), model.IsPCIAddress(s); got != want {
			t.Errorf("isPCIAddress(%q) = %v, model says %v", s, got, want)
		}
	})
}

// The hand-written matchers accept what the regular expressions they
// replace accepted.
var (
	reHCTL   = regexp.MustCompile(`^(\d+):(\d+):(\d+):(\d+)$`)
	reATA    = regexp.MustCompile(`^ata(\d+)$`)
	reVirtio = regexp.MustCompile(`^virtio\d+$`)
)

func checkMatchers(t *testing.T, s string) {
	if got, want := hctlParts(s), reHCTL.FindStringSubmatch(s); !(got == nil && want == nil || want != nil && slices.Equal(got, want[1:])) {
		t.Errorf("hctlParts(%q) = %q, the regexp says %q", s, got, want)
	}
	if got, want := isATA(s), reATA.MatchString(s); got != want {
		t.Errorf("isATA(%q) = %v, the regexp says %v", s, got, want)
	}
	if got, want := isVirtio(s), reVirtio.MatchString(s); got != want {
		t.Errorf("isVirtio(%q) = %v, the regexp says %v", s, got, want)
	}
}

func TestMatchersAgreeWithRegexps(t *testing.T) {
	for _, s := range []string{"0:0:1:0", "10:2:33:4", "0:0:1", "0:0:1:0:0", "0:0:a:0", ":0:1:0", "0:0:1:", "ata1", "ata", "ata1a", "ATA1", "ata١",
		"virtio0", "virtio12", "virtio", "virtiox", "virtio1\n", "", "0000:00:02.0"} {
		checkMatchers(t, s)
	}
}

func FuzzMatchers(f *testing.F) {
	for _, s := range []string{"0:0:1:0", "ata3", "virtio7"} {
		f.Add(s)
	}
	f.Fuzz(checkMatchers)
}
