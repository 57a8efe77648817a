package virt

import (
	"os"
	"strings"
	"testing"
)

// TestParseShareSupport reads the domain capabilities libvirt 9.0 gave on
// this machine (testdata/domcaps-q35-tcg.xml: virtiofs and memfd offered)
// and variants without one or the other.
func TestParseShareSupport(t *testing.T) {
	doc, err := os.ReadFile("testdata/domcaps-q35-tcg.xml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		edit   func(string) string
		says   string
		parsed ShareSupport
	}{
		{"libvirt 9.0", func(s string) string { return s }, "", ShareSupport{Virtiofs: true, SharedMemory: true}},
		{"no memfd", func(s string) string { return strings.Replace(s, "<value>memfd</value>", "", 1) }, "cannot share guest memory", ShareSupport{Virtiofs: true}},
		{"no virtiofs", func(s string) string { return strings.Replace(s, "<value>virtiofs</value>", "", 1) }, "no virtiofs", ShareSupport{SharedMemory: true}},
		{"memory backing unsupported", func(s string) string {
			return strings.Replace(s, "<memoryBacking supported='yes'>", "<memoryBacking supported='no'>", 1)
		}, "cannot share guest memory", ShareSupport{Virtiofs: true}},
	} {
		got, err := ParseShareSupport([]byte(tc.edit(string(doc))))
		if err != nil || got != tc.parsed {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.parsed)
			continue
		}
		err = got.Check()
		if (tc.says == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: Check() = %v, want %q", tc.name, err, tc.says)
		}
	}
	if _, err := ParseShareSupport([]byte("<domainCapabilities")); err == nil {
		t.Error("truncated XML parsed")
	}
}
