package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientLinksNoHypervisor: the client, the wire types and the token
// code link neither the controller nor libvirt, so that a program talking
// to a hostctl daemon stays small.
func TestClientLinksNoHypervisor(t *testing.T) {
	pkgs := []string{
		"github.com/vmeta/vmeta/hostctl/api/client",
		"github.com/vmeta/vmeta/hostctl/api/types",
		"github.com/vmeta/vmeta/hostctl/api/auth",
	}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < len(pkgs) {
		t.Fatalf("go list -deps listed %d packages", len(deps))
	}
	for _, dep := range deps {
		for _, bad := range []string{
			"github.com/digitalocean/go-libvirt",
			"github.com/vmeta/vmeta/hostctl/controller",
			"github.com/vmeta/vmeta/hostctl/virt",
			"github.com/vmeta/vmeta/hostctl/api", // the server
		} {
			if dep == bad || strings.HasPrefix(dep, bad+"/") && !strings.HasPrefix(dep, "github.com/vmeta/vmeta/hostctl/api/") {
				t.Errorf("%s depends on %s", strings.Join(pkgs, " "), dep)
			}
		}
	}
}
