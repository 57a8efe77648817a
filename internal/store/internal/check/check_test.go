package check

import (
	"errors"
	"testing"

	"github.com/vmeta/vmeta/internal/store"
)

func TestAddr(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1":              "10.0.0.1",
		"2001:DB8::1":           "2001:db8::1",
		"2001:0db8:0:0:0:0:0:1": "2001:db8::1",
		"::ffff:10.0.0.1":       "10.0.0.1",
		"fe80::1%br0":           "fe80::1%br0",
		"::":                    "::",
	} {
		got, err := Addr(in)
		if err != nil || got != want {
			t.Errorf("Addr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10.0.0.256", "10.0.0.1/24", "host", " 10.0.0.1", "[::1]", "10.0.0.1:80"} {
		if got, err := Addr(in); err == nil {
			t.Errorf("Addr(%q) = %q, want an error", in, got)
		}
	}
}

func TestPut(t *testing.T) {
	inst := store.Instance{Name: "vm", UUID: "u-1", Addresses: []string{"10.0.0.1", "::ffff:10.0.0.1", "2001:DB8::1"}, Revision: 9}
	gotInst, gotDoc, err := Put(inst, store.Document{Version: 4})
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if len(gotInst.Addresses) != 2 || gotInst.Addresses[0] != "10.0.0.1" || gotInst.Addresses[1] != "2001:db8::1" {
		t.Errorf("addresses = %q", gotInst.Addresses)
	}
	if gotInst.Revision != 0 || gotDoc.Version != 0 || gotDoc.InstanceUUID != "u-1" {
		t.Errorf("Put = %+v, %+v", gotInst, gotDoc)
	}
	if inst.Addresses[1] != "::ffff:10.0.0.1" {
		t.Errorf("Put modified the caller's slice")
	}
	if gotInst, _, _ := Put(store.Instance{Name: "vm", UUID: "u", Addresses: []string{}}, store.Document{}); gotInst.Addresses != nil {
		t.Errorf("empty addresses = %#v, want nil", gotInst.Addresses)
	}
	for _, bad := range []store.Instance{
		{Name: "", UUID: "u"},
		{Name: "a\nb", UUID: "u"},
		{Name: "vm", UUID: ""},
		{Name: "vm", UUID: "u}x"},
		{Name: "vm", UUID: "u x"},
		{Name: "vm", UUID: "u", Addresses: []string{"nope"}},
	} {
		if _, _, err := Put(bad, store.Document{}); err == nil {
			t.Errorf("Put(%+v): no error", bad)
		}
	}
	if _, _, err := Put(store.Instance{Name: "vm", UUID: "u"}, store.Document{InstanceUUID: "v"}); err == nil {
		t.Errorf("Put with another instance's document: no error")
	}
}

func TestConflictErrors(t *testing.T) {
	for _, err := range []error{
		NameHeld("vm", "u"), UUIDHeld("u", "vm"), AddrHeld("10.0.0.1", "vm"),
		Revision(0, 3), Revision(2, 0), Revision(2, 3),
	} {
		if !errors.Is(err, store.ErrConflict) {
			t.Errorf("%v does not wrap ErrConflict", err)
		}
	}
	if got := AddrHeld("10.0.0.1", "web1").Error(); got != "conflict: address 10.0.0.1 is used by instance web1" {
		t.Errorf("AddrHeld = %q", got)
	}
}
