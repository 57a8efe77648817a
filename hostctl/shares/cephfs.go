package shares

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// ProtoCephFS is the share protocol of CephFS shares: an export location
// MON[,MON…]:/PATH (Manila's CephFS export location), optionally followed
// by ",fs=NAME" for a file system other than the cluster's default
// (`hostctl share create --fs NAME` appends it). hostctl mounts it on the
// host with ceph-fuse as this host's own CephX client (CephX).
const ProtoCephFS = "cephfs"

// hostMounted reports whether shares of proto are mounted on the host
// (NFS, CephFS) rather than exported from a host directory (local).
func hostMounted(proto string) bool {
	return proto == types.ShareProtoNFS || proto == ProtoCephFS
}

// CephFSExport is a parsed CephFS export location.
type CephFSExport struct {
	// Mons are the monitors, host or host:port (IPv6 in brackets).
	Mons []string
	// Path is the directory in the file system (absolute, clean).
	Path string
	// FS is the file system's name ("": the cluster's default).
	FS string
}

// String is the canonical export location.
func (e CephFSExport) String() string {
	s := strings.Join(e.Mons, ",") + ":" + e.Path
	if e.FS != "" {
		s += ",fs=" + e.FS
	}
	return s
}

// MonHost is the monitors as ceph.conf's mon_host takes them.
func (e CephFSExport) MonHost() string { return strings.Join(e.Mons, ",") }

var cephFSNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ParseCephFSExport checks a CephFS export location MON[,MON…]:/PATH
// [,fs=NAME]: at least one monitor (a DNS name, an IPv4 address or a
// bracketed IPv6 address, each with an optional port), an absolute path
// without "..", whitespace, commas or control characters, and a file
// system name of letters, digits, '_', '.', '-'. The error names the
// field, the value and the rule.
func ParseCephFSExport(export string) (CephFSExport, error) {
	bad := func(rule string, args ...any) (CephFSExport, error) {
		return CephFSExport{}, field("export_location", export, "is not a CephFS export MON[,MON...]:/PATH[,fs=NAME]: "+rule, args...)
	}
	i := strings.Index(export, ":/")
	if i < 0 {
		return bad("no ':/' between the monitors and the path")
	}
	mons, rest := export[:i], export[i+1:]
	if mons == "" {
		return bad("no monitor")
	}
	var out CephFSExport
	p, opts, _ := strings.Cut(rest, ",")
	if opts != "" {
		name, ok := strings.CutPrefix(opts, "fs=")
		if !ok || !cephFSNameRE.MatchString(name) {
			return bad("%q after the path: only fs=NAME (letters, digits, '_', '.', '-'; at most 64) may follow it", opts)
		}
		out.FS = name
	}
	for _, m := range strings.Split(mons, ",") {
		mon, err := parseMon(m)
		if err != nil {
			return bad("monitor %q: %v", m, err)
		}
		out.Mons = append(out.Mons, mon)
	}
	switch {
	case strings.ContainsAny(p, " \t\n\r"):
		return bad("the path must not contain whitespace")
	case !isPrintableASCII(p):
		return bad("the path must be printable ASCII")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return bad("the path must not contain '..'")
		}
	}
	out.Path = path.Clean(p)
	return out, nil
}

// parseMon checks one monitor address and returns it canonical.
func parseMon(m string) (string, error) {
	if m == "" {
		return "", fmt.Errorf("empty")
	}
	host, port := m, ""
	if strings.HasPrefix(m, "[") {
		end := strings.Index(m, "]")
		if end < 0 {
			return "", fmt.Errorf("the IPv6 address has no closing ']'")
		}
		a, err := netip.ParseAddr(m[1:end])
		if err != nil || !a.Is6() {
			return "", fmt.Errorf("%q is not an IPv6 address", m[1:end])
		}
		host = "[" + a.String() + "]"
		rest := m[end+1:]
		if rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return "", fmt.Errorf("junk %q after the address", rest)
			}
			port = p
		}
	} else {
		if strings.Count(m, ":") > 1 {
			return "", fmt.Errorf("an IPv6 address must be in brackets")
		}
		if h, p, ok := strings.Cut(m, ":"); ok {
			host, port = h, p
		}
		if a, err := netip.ParseAddr(host); err == nil {
			if !a.Is4() {
				return "", fmt.Errorf("an IPv6 address must be in brackets")
			}
		} else if !hostnameRE.MatchString(host) || len(host) > 253 {
			return "", fmt.Errorf("%q is not a host name or IPv4 address", host)
		}
		host = strings.ToLower(host)
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("port %q: must be 1 to 65535", port)
		}
		return host + ":" + strconv.Itoa(n), nil
	}
	return host, nil
}
