package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

func TestPrintTransports(t *testing.T) {
	var b bytes.Buffer
	err := printTransports(Env{Stdout: &b}, []types.Transport{
		{Name: types.TransportHTTP, Revision: 3},
		{Name: types.TransportDrive, Revision: 3, NextBoot: 3, Note: "disk.config.3"},
		{Name: types.TransportFirmware, Revision: 2, NextBoot: 3, Note: "fixed while the guest runs; a restart brings the next boot's"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"TRANSPORT         REVISION  NEXT BOOT  NOTE",
		"metadata service  3         -          -",
		"config drive      3         -          disk.config.3",
		"firmware          2         3          fixed while the guest runs; a restart brings the next boot's",
	}
	if got := b.String(); !strings.Contains(got, strings.Join(want, "\n")) {
		t.Errorf("got\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
	b.Reset()
	if err := printTransports(Env{Stdout: &b}, nil); err != nil || b.Len() != 0 {
		t.Errorf("no transports: %q, %v", b.String(), err)
	}
}
