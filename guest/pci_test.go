package guest_test

import (
	"os"
	"strings"
	"testing"
)

// A tagged pci passthrough device (schema 1.2) is accepted: the rest of
// the document is applied, no udev rule or problem is written for it, and
// it is not reported as a type the agent does not know.
func TestApplyWithPCIDevice(t *testing.T) {
	e := newEnv(t)
	e.src.set(`{"uuid": "8c3f6a0e-1b2c-4d5e-8f90-123456789abc", "devices": [
 {"type": "pci", "bus": "pci", "address": "0000:00:0c.0", "tags": ["ml"]},
 {"type": "nic", "bus": "pci", "address": "0000:00:03.0", "mac": "52:54:00:aa:bb:01", "tags": ["nfvfunc1"]}
]}`)
	rep := e.apply()
	rules, err := os.ReadFile(e.cfg.RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rules), `ENV{VMETA_TAGS}="nfvfunc1"`) {
		t.Errorf("the nic was not applied:\n%s", rules)
	}
	if strings.Contains(string(rules), "0000:00:0c.0") || strings.Contains(string(rules), `"ml"`) {
		t.Errorf("a rule for the pci device:\n%s", rules)
	}
	if len(rep.State.Problems) != 0 {
		t.Errorf("problems: %v", rep.State.Problems)
	}
}
