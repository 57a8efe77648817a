package model

import "testing"

// TestParseSpecUnencrypted (issue 20, item 3): ParseSpec tells an explicit
// `encrypted: false` from an omitted one, so the encryption policy can
// refuse it under an encrypting flavor or image instead of overriding it.
func TestParseSpecUnencrypted(t *testing.T) {
	in, err := ParseSpec([]byte("name: a\ndisks:\n  - {name: vda, size: 1G, encrypted: false}\n  - {name: vdb, size: 1G}\n  - {name: vdc, size: 1G, encrypted: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, false} {
		if got := in.Disks[i].Unencrypted; got != want {
			t.Errorf("disks[%d] (%s).Unencrypted = %t, want %t", i, in.Disks[i].Name, got, want)
		}
	}
}
