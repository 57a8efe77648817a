package hostnet_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/hostnet"
)

// fakeHost is the host state `network setup-metadata` changes: the set of
// iptables rules and bridge addresses in place. It answers the check
// commands as iptables -C and ip addr show do and records every command.
type fakeHost struct {
	present map[string]bool
	ran     []string
}

var reRulePos = regexp.MustCompile(` OP (\S+) 1 `)

func (h *fakeHost) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := name + " " + strings.Join(args, " ")
	h.ran = append(h.ran, cmd)
	// The rule itself: the command without its operation (and -I's
	// position).
	rule := cmd
	for _, op := range []string{" -C ", " -I ", " -D "} {
		rule = strings.Replace(rule, op, " OP ", 1)
	}
	rule = reRulePos.ReplaceAllString(rule, " OP $1 ")
	switch {
	case name == "iptables" && slices.Contains(args, "-C"):
		if h.present[rule] {
			return nil, nil
		}
		return []byte("iptables: Bad rule (does a matching rule exist in that chain?)."), exec.Command("false").Run()
	case name == "iptables" && slices.Contains(args, "-I"):
		h.present[rule] = true
	case name == "iptables" && slices.Contains(args, "-D"):
		delete(h.present, rule)
	case name == "ip" && slices.Contains(args, "show"):
		if h.present["ip 169.254.169.254/32"] {
			return []byte("8: virbr0    inet 169.254.169.254/32 scope global virbr0"), nil
		}
		return nil, nil
	case name == "ip" && slices.Contains(args, "add"):
		h.present["ip 169.254.169.254/32"] = true
	case name == "ip" && slices.Contains(args, "del"):
		delete(h.present, "ip 169.254.169.254/32")
	}
	return nil, nil
}

func (h *fakeHost) changes(from int) []string {
	var out []string
	for _, c := range h.ran[from:] {
		if !strings.Contains(c, " -C ") && !strings.Contains(c, " show ") {
			out = append(out, c)
		}
	}
	return out
}

func TestSetupMetadata(t *testing.T) {
	for _, mode := range []string{"dnat", "address"} {
		t.Run(mode, func(t *testing.T) {
			h := &fakeHost{present: map[string]bool{}}
			setup := func(dryRun, remove bool) string {
				t.Helper()
				var out, errOut bytes.Buffer
				s := &hostnet.MetadataSetup{Mode: mode, Bridge: "virbr0", DryRun: dryRun, Remove: remove, Run: h.run,
					BridgeAddr: func(string) (netip.Addr, error) { return netip.MustParseAddr("192.168.122.1"), nil }}
				if err := s.Apply(context.Background(), &out, &errOut); err != nil {
					t.Fatal(err)
				}
				return out.String()
			}
			want := 2
			if mode == "address" {
				want = 1
			}
			// Dry run: prints the commands, changes nothing.
			n := len(h.ran)
			out := setup(true, false)
			if c := h.changes(n); len(c) != 0 {
				t.Errorf("dry run ran %v", c)
			}
			if lines := strings.Count(out, "\n"); lines != want {
				t.Errorf("dry run printed %d commands, want %d:\n%s", lines, want, out)
			}
			if mode == "dnat" && !strings.Contains(out, "iptables -w -t nat -I PREROUTING 1 -i virbr0 -d 169.254.169.254/32 -p tcp --dport 80 -m comment --comment 'vmeta metadata' -j DNAT --to-destination 192.168.122.1:8775") {
				t.Errorf("dry run:\n%s", out)
			}
			// Set up, then again: the second run changes nothing.
			n = len(h.ran)
			setup(false, false)
			if c := h.changes(n); len(c) != want {
				t.Errorf("setup ran %v", c)
			}
			n = len(h.ran)
			if out := setup(false, false); !strings.Contains(out, "already in place") || len(h.changes(n)) != 0 {
				t.Errorf("second setup ran %v:\n%s", h.changes(n), out)
			}
			// Remove, then again.
			n = len(h.ran)
			setup(false, true)
			if c := h.changes(n); len(c) != want || len(h.present) != 0 {
				t.Errorf("remove ran %v, left %v", c, h.present)
			}
			n = len(h.ran)
			if out := setup(false, true); !strings.Contains(out, "nothing to remove") || len(h.changes(n)) != 0 {
				t.Errorf("second remove ran %v:\n%s", h.changes(n), out)
			}
		})
	}
	bridge := func(string) (netip.Addr, error) { return netip.MustParseAddr("192.168.122.1"), nil }
	for _, s := range []*hostnet.MetadataSetup{{Mode: "bogus"}, {Mode: "dnat", To: "nope"}, {Mode: "dnat", To: "[::1]:80"}} {
		h := &fakeHost{present: map[string]bool{}}
		s.Run, s.BridgeAddr = h.run, bridge
		if err := s.Apply(context.Background(), io.Discard, io.Discard); !errors.Is(err, hostnet.ErrInvalid) || len(h.ran) != 0 {
			t.Errorf("%+v: %v (ran %v), want an invalid-setting error and nothing run", s, err, h.ran)
		}
	}
}
