package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// TestPrintHostDevices: instance show lists the devices the host's parts
// give the instance (the watchdog), and nothing without any.
func TestPrintHostDevices(t *testing.T) {
	var b bytes.Buffer
	inst := &types.Instance{HostDevices: []types.HostDevice{{Kind: "watchdog", Detail: "i6300esb, action reset"}}}
	if err := printHostDevices(Env{Stdout: &b}, inst); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); !strings.Contains(got, "Host devices:") || !strings.Contains(got, "watchdog  i6300esb, action reset") {
		t.Fatalf("output:\n%s", got)
	}
	b.Reset()
	if err := printHostDevices(Env{Stdout: &b}, &types.Instance{}); err != nil || b.Len() != 0 {
		t.Fatalf("no host devices: %q, %v", b.String(), err)
	}
}
