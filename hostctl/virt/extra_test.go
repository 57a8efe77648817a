package virt

import (
	"encoding/xml"
	"strings"
	"testing"
)

// TestBuildDomainExtraDevices: a part's device element lands in <devices>
// as given; anything but one known device element is refused, naming it.
func TestBuildDomainExtraDevices(t *testing.T) {
	host := fixtureHost()
	host.Extra = [][]byte{[]byte(`<watchdog model='i6300esb' action='poweroff'/>`)}
	out, err := BuildDomain(fixtureInstance(), host, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Watchdogs []struct {
			Model  string `xml:"model,attr"`
			Action string `xml:"action,attr"`
		} `xml:"devices>watchdog"`
	}
	if err := xml.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Watchdogs) != 1 || d.Watchdogs[0].Model != "i6300esb" || d.Watchdogs[0].Action != "poweroff" {
		t.Fatalf("watchdogs = %+v in\n%s", d.Watchdogs, out)
	}
	for _, bad := range []string{`<disk type='file'/>`, `<watchdog/><watchdog/>`, `<watchdog`, `text`} {
		host.Extra = [][]byte{[]byte(bad)}
		_, err := BuildDomain(fixtureInstance(), host, Options{})
		if err == nil || !strings.Contains(err.Error(), "extra device 0") {
			t.Errorf("extra %q: err = %v, want a refusal naming extra device 0", bad, err)
		}
	}
}
