package source

import (
	"regexp"
	"testing"
)

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// isUUID accepts what the regular expression it replaces accepted.
func FuzzIsUUID(f *testing.F) {
	for _, s := range []string{"1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e", "1F5A1F4E-7A4B-4C1E-9B0E-2F3A4B5C6D7E", "1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7", "1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7g",
		"1f5a1f4e7a4b-4c1e-9b0e-2f3a4b5c6d7e0", "1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isUUID(s), uuidRE.MatchString(s); got != want {
			t.Errorf("isUUID(%q) = %v, the regexp says %v", s, got, want)
		}
	})
}
