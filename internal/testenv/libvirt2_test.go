//go:build linux

package testenv

import (
	"strings"
	"testing"
)

// TestSecondLibvirtd: the second daemon answers on its own socket with
// its own host UUID, and has no domain of the first.
func TestSecondLibvirtd(t *testing.T) {
	uri := SecondLibvirtd(t)
	first, err := connectLibvirt(RequireLibvirt(t))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Disconnect()
	second, err := connectLibvirt(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Disconnect()
	c1, err := first.Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := second.Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	uuidOf := func(caps []byte) string {
		s := string(caps)
		i := strings.Index(s, "<uuid>")
		j := strings.Index(s, "</uuid>")
		if i < 0 || j < i {
			t.Fatalf("no host uuid in capabilities:\n%s", s)
		}
		return s[i+6 : j]
	}
	if u1, u2 := uuidOf(c1), uuidOf(c2); u1 == u2 {
		t.Fatalf("both daemons have host uuid %s", u1)
	}
	ds, _, err := second.ConnectListAllDomains(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 0 {
		t.Fatalf("the second daemon has domains: %v", ds)
	}
}
