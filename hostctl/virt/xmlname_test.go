package virt

import (
	"os"
	"testing"
)

// TestXMLName: a define names its domain from the root's <name> child,
// read up to it: not a nested <name>, "(unnamed)" without one or before
// a syntax error; what follows the name is not read.
func TestXMLName(t *testing.T) {
	web1, err := os.ReadFile("testdata/web1.xml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ doc, want string }{
		{string(web1), "web1"},
		{`<domain type="kvm"><name>a</name><uuid>x</uuid></domain>`, "a"},
		{`<domain><cpu><name>nested</name></cpu><name>b</name></domain>`, "b"},
		{`<domain><cpu><name>nested</name></cpu></domain>`, "(unnamed)"},
		{`<domain><name></name></domain>`, "(unnamed)"},
		{`<domain><uuid>`, "(unnamed)"},
		{`<domain><name>c</name><devices><disk></devices>`, "c"},
		{``, "(unnamed)"},
	} {
		if got := xmlName([]byte(c.doc)); got != c.want {
			t.Errorf("xmlName(%.40q) = %q, want %q", c.doc, got, c.want)
		}
	}
}
