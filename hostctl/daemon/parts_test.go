package daemon

import (
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/configdrive"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/hostctl/parts/firmware"
	"github.com/vmeta/vmeta/hostctl/shares"
)

// TestPartsAnswerEveryOperation is the parts × operations table: every
// registered part declares what it does (act, refuse with a reason,
// nothing) for every operation, so a new operation or a new part cannot
// silently forget the other.
func TestPartsAnswerEveryOperation(t *testing.T) {
	parts, _ := Parts(PartsConfig{Disks: disks.New(disks.Options{}), Shares: shares.New(nil, nil, shares.Options{ShareRoot: t.TempDir()}), Faults: faults.New(nil, nil)})
	// The firmware part is registered with a hypervisor only (virt.go).
	parts = append(parts, firmware.New(nil, "", false, nil))
	// So is the config-drive media part (media.go).
	parts = append(parts, configdrive.New(nil, "", nil))
	if len(parts) == 0 {
		t.Fatal("no parts registered")
	}
	var all []part.Answerer
	for _, p := range parts {
		all = append(all, p)
	}
	names := map[string]bool{}
	for _, p := range all {
		if names[p.Name()] {
			t.Errorf("part %s registered twice", p.Name())
		}
		names[p.Name()] = true
		for _, op := range p.Answers().Missing() {
			t.Errorf("part %s declares no (valid) answer for operation %s", p.Name(), op)
		}
		for op := range p.Answers() {
			if !isOp(op) {
				t.Errorf("part %s answers %q, which is no operation", p.Name(), op)
			}
		}
	}
	for _, want := range []string{"disks", "vmstate", "passthrough", "watchdog", "shares", "firmware", "configdrive", "faults"} {
		if !names[want] {
			t.Errorf("part %s is not registered", want)
		}
	}
	t.Logf("parts × operations:\n%s", part.Table(all))
}

func isOp(op part.Op) bool {
	for _, o := range part.Ops() {
		if o == op {
			return true
		}
	}
	return false
}
