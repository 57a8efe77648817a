package model

import (
	"regexp"
	"testing"
)

func TestParsePCIAddress(t *testing.T) {
	tests := []struct {
		in   string
		want PCIAddress
		ok   bool
	}{
		{"0000:00:03.0", PCIAddress{Slot: 3}, true},
		{"0001:af:1f.7", PCIAddress{Domain: 1, Bus: 0xaf, Slot: 0x1f, Function: 7}, true},
		{"ffff:ff:ff.7", PCIAddress{Domain: 0xffff, Bus: 0xff, Slot: 0xff, Function: 7}, true}, // slot range is the caller's
		{"0000:00:03.8", PCIAddress{}, false},
		{"0000:00:03", PCIAddress{}, false},
		{"00:03.0", PCIAddress{}, false},
		{"0000:0A:03.0", PCIAddress{}, false}, // upper case: Normalize lowers first
		{"0000-00:03.0", PCIAddress{}, false},
		{"0000:00:03.0 ", PCIAddress{}, false},
		{"+000:00:03.0", PCIAddress{}, false},
		{"", PCIAddress{}, false},
	}
	for _, tt := range tests {
		got, err := ParsePCIAddress(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParsePCIAddress(%q) = %+v, %v; want %+v, ok=%t", tt.in, got, err, tt.want, tt.ok)
		}
		if tt.ok && got.String() != tt.in {
			t.Errorf("ParsePCIAddress(%q).String() = %q", tt.in, got.String())
		}
	}
}

func TestParseMAC(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"52:54:00:12:34:56", true},
		{"ff:ff:ff:ff:ff:ff", true},
		{"52:54:00:12:34:5G", false},
		{"52:54:00:12:34:5A", false},
		{"52-54-00-12-34-56", false},
		{"52:54:00:12:34", false},
		{"52:54:00:12:34:56:78", false},
		{"", false},
	}
	for _, tt := range tests {
		mac, err := ParseMAC(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseMAC(%q) = %v, %v; want ok=%t", tt.in, mac, err, tt.ok)
		}
		if tt.ok && mac.String() != tt.in {
			t.Errorf("ParseMAC(%q) = %s", tt.in, mac)
		}
	}
}

func TestCheckDiskSize(t *testing.T) {
	for _, s := range []string{"1", "10G", "512K", "8M", "2T"} {
		if err := CheckDiskSize(s); err != nil {
			t.Errorf("CheckDiskSize(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", "G", "lots", "10g", "10GB", "-1", "1.5G", "10 G"} {
		if CheckDiskSize(s) == nil {
			t.Errorf("CheckDiskSize(%q) accepted", s)
		}
	}
}

// The regular expressions the parsers replaced: they must agree on every
// input.
var (
	pciRE  = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	macRE  = regexp.MustCompile(`^[0-9a-f]{2}(:[0-9a-f]{2}){5}$`)
	sizeRE = regexp.MustCompile(`^[0-9]+[KMGT]?$`)
)

func FuzzParseAddresses(f *testing.F) {
	for _, s := range []string{"0000:00:03.0", "0000:00:03.8", "52:54:00:12:34:56", "10G", "", "0000:0A:1f.7", "ff:ff:ff:ff:ff:fF"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParsePCIAddress(s)
		if (err == nil) != pciRE.MatchString(s) {
			t.Fatalf("ParsePCIAddress(%q) = %v, the regexp says %t", s, err, pciRE.MatchString(s))
		}
		if err == nil && a.String() != s {
			t.Fatalf("ParsePCIAddress(%q).String() = %q", s, a.String())
		}
		mac, err := ParseMAC(s)
		if (err == nil) != macRE.MatchString(s) {
			t.Fatalf("ParseMAC(%q) = %v, the regexp says %t", s, err, macRE.MatchString(s))
		}
		if err == nil && mac.String() != s {
			t.Fatalf("ParseMAC(%q) = %s", s, mac)
		}
		if (CheckDiskSize(s) == nil) != sizeRE.MatchString(s) {
			t.Fatalf("CheckDiskSize(%q) = %v, the regexp says %t", s, CheckDiskSize(s), sizeRE.MatchString(s))
		}
	})
}
