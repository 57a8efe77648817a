package udev

import (
	"regexp"
	"testing"
)

var safeMatchRE = regexp.MustCompile(`^[A-Za-z0-9/:._+@=,-]+$`)

// safeMatch accepts what the regular expression it replaces accepted.
func FuzzSafeMatch(f *testing.F) {
	for _, s := range []string{"/devices/pci0000:00/0000:00:02.0/virtio1/block/vda", "fa:16:3e:00:00:01", "", "a*", "a b", `a"`, "a\\b", "é", "a|b", "[x]", "~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := safeMatch(s), safeMatchRE.MatchString(s); got != want {
			t.Errorf("safeMatch(%q) = %v, the regexp says %v", s, got, want)
		}
	})
}
