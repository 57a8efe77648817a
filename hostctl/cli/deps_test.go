package cli_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestClientCommandsLinkNoHypervisor: the client commands (this package)
// link neither the controller, libvirt nor the daemon; only the serve
// command (hostctl/cli/serve) does.
func TestClientCommandsLinkNoHypervisor(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/vmeta/vmeta/hostctl/cli").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/vmeta/vmeta/hostctl/api/client") {
		t.Fatalf("go list -deps does not list the client: %v", deps)
	}
	for _, dep := range deps {
		for _, bad := range []string{
			"github.com/digitalocean/go-libvirt",
			"github.com/vmeta/vmeta/hostctl/controller",
			"github.com/vmeta/vmeta/hostctl/virt",
			"github.com/vmeta/vmeta/hostctl/daemon",
			"github.com/vmeta/vmeta/hostctl/cli/serve",
		} {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("hostctl/cli depends on %s", dep)
			}
		}
	}
}
