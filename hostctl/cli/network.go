package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
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

// cmdRunner runs a host command and returns its combined output; a
// non-zero exit is an error (an *exec.ExitError).
type cmdRunner func(ctx context.Context, name string, args ...string) ([]byte, error)

func execRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// metadataSetup is `hostctl network setup-metadata`: the host side of
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
type metadataSetup struct {
	mode   string
	bridge string
	to     string
	dryRun bool
	remove bool
	run    cmdRunner
	// bridgeAddr returns the bridge's first IPv4 address.
	bridgeAddr func(bridge string) (netip.Addr, error)
}

func networkSetupMetadata(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("network setup-metadata", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	s := &metadataSetup{run: execRunner, bridgeAddr: bridgeIPv4}
	fs.StringVar(&s.mode, "mode", "dnat", "dnat (an iptables DNAT rule to the listener on the bridge address) or address (169.254.169.254 on the bridge)")
	fs.StringVar(&s.bridge, "bridge", "virbr0", "the libvirt network's bridge the guests are on")
	fs.StringVar(&s.to, "to", "", "dnat mode: the metadata listener, ADDR:PORT (default <bridge IPv4>:8775)")
	fs.BoolVar(&s.dryRun, "dry-run", false, "print the commands that would change the host, change nothing")
	fs.BoolVar(&s.remove, "remove", false, "undo the setup")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: network setup-metadata takes no arguments", errUsage)
	}
	return s.apply(ctx, env)
}

// step is one host change: check tells whether it is in place already
// (nil check: never), do makes it, undo reverses it.
type step struct {
	what     string
	check    []string
	do, undo []string
}

func (s *metadataSetup) steps() ([]step, string, error) {
	switch s.mode {
	case "dnat":
		to := s.to
		if to == "" {
			a, err := s.bridgeAddr(s.bridge)
			if err != nil {
				return nil, "", err
			}
			to = net.JoinHostPort(a.String(), strconv.Itoa(DefaultMetadataPort))
		}
		ap, err := netip.ParseAddrPort(to)
		if err != nil || !ap.Addr().Is4() {
			return nil, "", fmt.Errorf("%w: --to %q: must be IPv4ADDR:PORT", errUsage, to)
		}
		dnat := []string{"PREROUTING", "-i", s.bridge, "-d", MetadataAddress + "/32", "-p", "tcp", "--dport", "80",
			"-m", "comment", "--comment", "vmeta metadata", "-j", "DNAT", "--to-destination", ap.String()}
		accept := []string{"INPUT", "-i", s.bridge, "-d", ap.Addr().String() + "/32", "-p", "tcp", "--dport", strconv.Itoa(int(ap.Port())),
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
				{what: "DNAT " + MetadataAddress + ":80 on " + s.bridge + " to " + ap.String(),
					check: ipt("nat", "-C", dnat), do: ipt("nat", "-I", dnat), undo: ipt("nat", "-D", dnat)},
				{what: "accept " + ap.String() + " from " + s.bridge,
					check: ipt("", "-C", accept), do: ipt("", "-I", accept), undo: ipt("", "-D", accept)},
			}, fmt.Sprintf("the metadata service must listen on %s: hostctl serve --metadata-listen %s (or vmeta-metadata --listen %s)", ap, ap, ap),
			nil
	case "address":
		cidr := MetadataAddress + "/32"
		return []step{{what: cidr + " on " + s.bridge,
				check: []string{"ip", "-4", "-o", "addr", "show", "dev", s.bridge, "to", cidr},
				do:    []string{"ip", "addr", "add", cidr, "dev", s.bridge},
				undo:  []string{"ip", "addr", "del", cidr, "dev", s.bridge}}},
			fmt.Sprintf("the metadata service must listen on %s:80: hostctl serve --metadata-listen %s:80", MetadataAddress, MetadataAddress),
			nil
	}
	return nil, "", fmt.Errorf("%w: --mode %q: must be dnat or address", errUsage, s.mode)
}

// present runs a step's check: true when the change is in place.
func (s *metadataSetup) present(ctx context.Context, st step) (bool, error) {
	out, err := s.run(ctx, st.check[0], st.check[1:]...)
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

func (s *metadataSetup) apply(ctx context.Context, env Env) error {
	steps, note, err := s.steps()
	if err != nil {
		return err
	}
	if s.remove {
		for i, j := 0, len(steps)-1; i < j; i, j = i+1, j-1 {
			steps[i], steps[j] = steps[j], steps[i]
		}
	}
	changed := 0
	for _, st := range steps {
		have, err := s.present(ctx, st)
		if err != nil {
			if !s.dryRun {
				return err
			}
			fmt.Fprintf(env.Stderr, "hostctl: cannot check %q (%v); printing the command anyway\n", st.what, err)
			have = s.remove
		}
		cmd := st.do
		if s.remove {
			if !have {
				continue
			}
			cmd = st.undo
		} else if have {
			fmt.Fprintf(env.Stdout, "ok: %s (already in place)\n", st.what)
			continue
		}
		changed++
		if s.dryRun {
			fmt.Fprintln(env.Stdout, shellJoin(cmd))
			continue
		}
		if out, err := s.run(ctx, cmd[0], cmd[1:]...); err != nil {
			return fmt.Errorf("%s: %w: %s", shellJoin(cmd), err, bytes.TrimSpace(out))
		}
		verb := "set up"
		if s.remove {
			verb = "removed"
		}
		fmt.Fprintf(env.Stdout, "%s: %s\n", verb, st.what)
	}
	switch {
	case s.remove && changed == 0:
		fmt.Fprintln(env.Stdout, "nothing to remove")
	case !s.remove && !s.dryRun:
		fmt.Fprintf(env.Stdout, "guests on %s reach the metadata service at http://%s/; %s\n", s.bridge, MetadataAddress, note)
	}
	return nil
}

// bridgeIPv4 is the first IPv4 address of a network interface.
func bridgeIPv4(name string) (netip.Addr, error) {
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
