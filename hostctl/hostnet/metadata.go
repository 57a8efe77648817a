// Package hostnet changes the host's network so that guests reach the
// metadata service at 169.254.169.254:80 (`hostctl network
// setup-metadata`): an iptables DNAT rule, or the address on the bridge.
// Every step checks before it changes anything, so running it twice is
// harmless, and Remove undoes it.
package hostnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
)

// MetadataAddress is where guests look for the metadata service.
const MetadataAddress = "169.254.169.254"

// DefaultMetadataPort is the port `network setup-metadata` sends guests to
// on the bridge's address (dnat mode) unless --to says otherwise.
const DefaultMetadataPort = 8775

// ErrInvalid marks an invalid setting (the message names it).
var ErrInvalid = errors.New("invalid setting")

// Runner runs a host command and returns its combined output; a non-zero
// exit is an error (an *exec.ExitError).
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// ExecRunner runs host commands for real.
func ExecRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// MetadataSetup is `hostctl network setup-metadata`: the host side of
// "the guest reaches the metadata service at 169.254.169.254:80". Two
// ways, both idempotent (each step checks before it changes anything):
//
//   - dnat (default): an iptables rule in the nat table's PREROUTING
//     chain sends TCP to 169.254.169.254:80 arriving on the bridge to the
//     metadata listener on the bridge's own address (--to, default
//     <bridge IPv4>:8775; run `hostctl serve --metadata-listen` there),
//     and an INPUT rule accepts it. DNAT keeps the guest's source address,
//     which is how the service identifies the guest.
//   - address: 169.254.169.254/32 on the bridge itself; the service then
//     listens on 169.254.169.254:80 (`--metadata-listen
//     169.254.169.254:80`). No packet rewriting; port 80 needs root.
//
// The guest's packets reach the host because 169.254.169.254 is off-link
// for the guest and the host (the bridge address) is its default gateway.
type MetadataSetup struct {
	// Mode is dnat or address.
	Mode string
	// Bridge is the libvirt network's bridge the guests are on.
	Bridge string
	// To is the metadata listener of dnat mode, ADDR:PORT (default
	// <bridge IPv4>:DefaultMetadataPort).
	To string
	// DryRun prints the commands that would change the host, and changes
	// nothing.
	DryRun bool
	// Remove undoes the setup.
	Remove bool
	// Run runs host commands (ExecRunner when nil).
	Run Runner
	// BridgeAddr returns the bridge's first IPv4 address (BridgeIPv4 when
	// nil).
	BridgeAddr func(bridge string) (netip.Addr, error)
}

func (s *MetadataSetup) runner() Runner {
	if s.Run == nil {
		return ExecRunner
	}
	return s.Run
}

func (s *MetadataSetup) bridgeAddrFunc() func(string) (netip.Addr, error) {
	if s.BridgeAddr == nil {
		return BridgeIPv4
	}
	return s.BridgeAddr
}

// step is one host change: check tells whether it is in place already
// (nil check: never), do makes it, undo reverses it.
type step struct {
	what     string
	check    []string
	do, undo []string
}

func (s *MetadataSetup) steps() ([]step, string, error) {
	switch s.Mode {
	case "dnat":
		to := s.To
		if to == "" {
			a, err := s.bridgeAddrFunc()(s.Bridge)
			if err != nil {
				return nil, "", err
			}
			to = net.JoinHostPort(a.String(), strconv.Itoa(DefaultMetadataPort))
		}
		ap, err := netip.ParseAddrPort(to)
		if err != nil || !ap.Addr().Is4() {
			return nil, "", fmt.Errorf("%w: --to %q: must be IPv4ADDR:PORT", ErrInvalid, to)
		}
		dnat := []string{"PREROUTING", "-i", s.Bridge, "-d", MetadataAddress + "/32", "-p", "tcp", "--dport", "80",
			"-m", "comment", "--comment", "vmeta metadata", "-j", "DNAT", "--to-destination", ap.String()}
		accept := []string{"INPUT", "-i", s.Bridge, "-d", ap.Addr().String() + "/32", "-p", "tcp", "--dport", strconv.Itoa(int(ap.Port())),
			"-m", "comment", "--comment", "vmeta metadata", "-j", "ACCEPT"}
		ipt := func(table, op string, rule []string) []string {
			out := []string{"iptables", "-w"}
			if table != "" {
				out = append(out, "-t", table)
			}
			out = append(out, op, rule[0])
			if op == "-I" {
				out = append(out, "1")
			}
			return append(out, rule[1:]...)
		}
		return []step{
				{what: "DNAT " + MetadataAddress + ":80 on " + s.Bridge + " to " + ap.String(),
					check: ipt("nat", "-C", dnat), do: ipt("nat", "-I", dnat), undo: ipt("nat", "-D", dnat)},
				{what: "accept " + ap.String() + " from " + s.Bridge,
					check: ipt("", "-C", accept), do: ipt("", "-I", accept), undo: ipt("", "-D", accept)},
			}, fmt.Sprintf("the metadata service must listen on %s: hostctl serve --metadata-listen %s (or vmeta-metadata --listen %s)", ap, ap, ap),
			nil
	case "address":
		cidr := MetadataAddress + "/32"
		return []step{{what: cidr + " on " + s.Bridge,
				check: []string{"ip", "-4", "-o", "addr", "show", "dev", s.Bridge, "to", cidr},
				do:    []string{"ip", "addr", "add", cidr, "dev", s.Bridge},
				undo:  []string{"ip", "addr", "del", cidr, "dev", s.Bridge}}},
			fmt.Sprintf("the metadata service must listen on %s:80: hostctl serve --metadata-listen %s:80", MetadataAddress, MetadataAddress),
			nil
	}
	return nil, "", fmt.Errorf("%w: --mode %q: must be dnat or address", ErrInvalid, s.Mode)
}

// present runs a step's check: true when the change is in place.
func (s *MetadataSetup) present(ctx context.Context, st step) (bool, error) {
	out, err := s.runner()(ctx, st.check[0], st.check[1:]...)
	var ee *exec.ExitError
	switch {
	case err == nil && st.check[0] == "ip":
		// ip addr show prints nothing when the address is not there.
		return len(bytes.TrimSpace(out)) > 0, nil
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && st.check[0] == "iptables" && ee.ExitCode() == 1:
		return false, nil // -C: "Bad rule (does a matching rule exist in that chain?)"
	}
	return false, fmt.Errorf("%s: %w: %s", strings.Join(st.check, " "), err, bytes.TrimSpace(out))
}

// Apply makes the host changes (or undoes them with Remove), reporting
// each on stdout; stderr gets what a dry run could not check.
func (s *MetadataSetup) Apply(ctx context.Context, stdout, stderr io.Writer) error {
	steps, note, err := s.steps()
	if err != nil {
		return err
	}
	if s.Remove {
		for i, j := 0, len(steps)-1; i < j; i, j = i+1, j-1 {
			steps[i], steps[j] = steps[j], steps[i]
		}
	}
	changed := 0
	for _, st := range steps {
		have, err := s.present(ctx, st)
		if err != nil {
			if !s.DryRun {
				return err
			}
			fmt.Fprintf(stderr, "hostctl: cannot check %q (%v); printing the command anyway\n", st.what, err)
			have = s.Remove
		}
		cmd := st.do
		if s.Remove {
			if !have {
				continue
			}
			cmd = st.undo
		} else if have {
			fmt.Fprintf(stdout, "ok: %s (already in place)\n", st.what)
			continue
		}
		changed++
		if s.DryRun {
			fmt.Fprintln(stdout, shellJoin(cmd))
			continue
		}
		if out, err := s.runner()(ctx, cmd[0], cmd[1:]...); err != nil {
			return fmt.Errorf("%s: %w: %s", shellJoin(cmd), err, bytes.TrimSpace(out))
		}
		verb := "set up"
		if s.Remove {
			verb = "removed"
		}
		fmt.Fprintf(stdout, "%s: %s\n", verb, st.what)
	}
	switch {
	case s.Remove && changed == 0:
		fmt.Fprintln(stdout, "nothing to remove")
	case !s.Remove && !s.DryRun:
		fmt.Fprintf(stdout, "guests on %s reach the metadata service at http://%s/; %s\n", s.Bridge, MetadataAddress, note)
	}
	return nil
}

// BridgeIPv4 is the first IPv4 address of a network interface.
func BridgeIPv4(name string) (netip.Addr, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bridge %s: %w (is the libvirt network started? see --bridge)", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bridge %s: %w", name, err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && p.Addr().String() != MetadataAddress {
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("bridge %s has no IPv4 address; give --to ADDR:PORT", name)
}

// shellJoin quotes a command for printing.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$`\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
