package uuid

import (
	"regexp"
	"testing"
)

// TestUUID: the one UUID check accepts 8-4-4-4-12 hex digits in either
// case (RFC 4122: case-insensitive on input) and canonicalizes to lower
// case; anything else is refused.
func TestUUID(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"0f8e6d5c-4b3a-4291-8c7d-6e5f4a3b2c1d", "0f8e6d5c-4b3a-4291-8c7d-6e5f4a3b2c1d", true},
		{"0F8E6D5C-4B3A-4291-8C7D-6E5F4A3B2C1D", "0f8e6d5c-4b3a-4291-8c7d-6e5f4a3b2c1d", true},
		{"0f8E6d5C-4b3A-4291-8c7D-6e5F4a3B2c1D", "0f8e6d5c-4b3a-4291-8c7d-6e5f4a3b2c1d", true},
		{"", "", false},
		{"0f8e6d5c4b3a42918c7d6e5f4a3b2c1d", "", false},
		{"0f8e6d5c-4b3a-4291-8c7d-6e5f4a3b2c1", "", false},
		{"0f8e6d5c-4b3a-4291-8c7d-6e5f4a3b2c1dd", "", false},
		{"0f8e6d5c_4b3a-4291-8c7d-6e5f4a3b2c1d", "", false},
		{"0f8e6d5g-4b3a-4291-8c7d-6e5f4a3b2c1d", "", false},
		{"{0f8e6d5c-4b3a-4291-8c7d-6e5f4a3b2c1}", "", false},
		{"../../../../../../../../../etc/passwd", "", false},
	} {
		if got := Valid(tc.in); got != tc.ok {
			t.Errorf("Valid(%q) = %t, want %t", tc.in, got, tc.ok)
		}
		if got, ok := Canonical(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("Canonical(%q) = %q, %t; want %q, %t", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// uuidRE is the regular expression the hand-written copies replaced.
var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// FuzzUUID: Valid accepts what the regular expression accepts, and
// Canonical is stable.
func FuzzUUID(f *testing.F) {
	f.Add("0f8e6d5c-4b3a-4291-8c7d-6e5f4a3b2c1d")
	f.Add("0F8E6D5C-4B3A-4291-8C7D-6E5F4A3B2C1D")
	f.Add("1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e\n")
	f.Add("1f5a1f4e7a4b-4c1e-9b0e-2f3a4b5c6d7e0")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Valid(s), uuidRE.MatchString(s); got != want {
			t.Fatalf("Valid(%q) = %t, the regexp says %t", s, got, want)
		}
		c, ok := Canonical(s)
		if ok != Valid(s) {
			t.Fatalf("%q: Canonical ok %t, Valid %t", s, ok, Valid(s))
		}
		if ok && (!Valid(c) || len(c) != 36) {
			t.Fatalf("%q: canonical %q is not a UUID", s, c)
		}
		if c2, _ := Canonical(c); ok && c2 != c {
			t.Fatalf("%q: canonical form not stable: %q then %q", s, c, c2)
		}
	})
}
