package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Canonical forms of the headers the server reads (indexing http.Header
// directly skips canonicalization on the hot path).
const (
	hdrInstanceID   = "X-Instance-Id"
	hdrTenantID     = "X-Tenant-Id"
	hdrSignature    = "X-Instance-Id-Signature"
	hdrForwardedFor = "X-Forwarded-For"
	hdrToken        = "X-Aws-Ec2-Metadata-Token"
	hdrTokenTTL     = "X-Aws-Ec2-Metadata-Token-Ttl-Seconds"
)

// caller is who a request comes from, as far as the headers and the peer
// address tell before any store lookup.
type caller struct {
	// peer is the TCP peer (unmapped, without zone); invalid if the
	// remote address does not parse.
	peer netip.Addr
	// addr identifies the guest by address: the peer (outside the
	// trusted proxy networks), or the X-Forwarded-For entry a trusted
	// proxy added. Never inside a trusted proxy network; invalid in proxy
	// mode.
	addr netip.Addr
	// instanceID and tenantID are set in proxy mode (signed X-Instance-ID
	// from a trusted proxy).
	instanceID, tenantID string
}

// identifyError is a refusal with Nova's status code and message.
type identifyError struct {
	status int
	msg    string
}

var (
	errMissingInstanceID = &identifyError{http.StatusBadRequest, "X-Instance-ID header is missing from request."}
	errMissingSignature  = &identifyError{http.StatusBadRequest, "X-Instance-ID-Signature header is missing from request."}
	errMissingTenantID   = &identifyError{http.StatusBadRequest, "X-Tenant-ID header is missing from request."}
	errMultiInstanceID   = &identifyError{http.StatusBadRequest, "Multiple X-Instance-ID headers found within request."}
	errMultiTenantID     = &identifyError{http.StatusBadRequest, "Multiple X-Tenant-ID headers found within request."}
	errMultiSignature    = &identifyError{http.StatusBadRequest, "Multiple X-Instance-ID-Signature headers found within request."}
	errBadForwardedFor   = &identifyError{http.StatusBadRequest, "Invalid X-Forwarded-For header."}
	errMultiForwardedFor = &identifyError{http.StatusBadRequest, "Multiple X-Forwarded-For headers found within request."}
	errNoForwardedFor    = &identifyError{http.StatusBadRequest, "X-Forwarded-For header is missing from request (a trusted proxy must name the guest)."}
	errProxyForwardedFor = &identifyError{http.StatusBadRequest, "X-Forwarded-For names no address outside the trusted proxy networks."}
	errBadSignature      = &identifyError{http.StatusForbidden, "Invalid proxy request signature."}
)

// peerAddr parses a request's RemoteAddr ("ip:port", or a bare ip) into an
// unmapped address without zone.
func peerAddr(remote string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

// trusted reports whether a peer is inside one of the trusted proxy
// networks.
func (s *Server) trusted(peer netip.Addr) bool {
	for _, p := range s.trustedProxies {
		if p.Contains(peer) {
			return true
		}
	}
	return false
}

// identify reads who is asking (Nova's handler.py, with the proxy mode
// limited to trusted peers):
//
//   - From a peer outside the trusted proxy networks, only the peer address
//     counts; X-Instance-ID, X-Tenant-ID, the signature and X-Forwarded-For
//     are ignored.
//   - A trusted proxy's own address names no guest: an instance that
//     claims it is never served by it (hostctl refuses such an address at
//     apply; a replica may trust other networks than the host that
//     published the instance, so the server does not rely on that).
//   - From a trusted proxy, with a proxy secret configured: the signed
//     headers name the instance, and nothing else does (X-Forwarded-For is
//     not signed, so it is never honoured then): 400 for a missing or
//     duplicated header, 403 for a signature that no secret produces.
//     (The project check, 404, needs the document and is done by the
//     caller.)
//   - From a trusted proxy, without a proxy secret: X-Forwarded-For names
//     the guest by the entry the trusted proxies added, the right-most
//     address outside the trusted networks (entries to its left came
//     from the client and are ignored). One X-Forwarded-For header only
//     (proxies that add a header of their own beside the client's would
//     let the client's come first): several, none, an entry that does not
//     parse right of the chosen one, or only trusted addresses are 400.
func (s *Server) identify(h http.Header, remote string) (caller, *identifyError) {
	c := caller{peer: peerAddr(remote)}
	c.addr = c.peer
	if len(s.trustedProxies) == 0 || !c.peer.IsValid() || !s.trusted(c.peer) {
		return c, nil
	}
	c.addr = netip.Addr{}
	if s.proxySecrets != nil {
		id, tenant, err := proxyHeaders(h[hdrInstanceID], h[hdrTenantID], h[hdrSignature], s.proxySecrets)
		if err != nil {
			return c, err
		}
		c.instanceID, c.tenantID = id, tenant
		return c, nil
	}
	a, err := s.forwardedClient(h[hdrForwardedFor])
	if err != nil {
		return c, err
	}
	c.addr = a
	return c, nil
}

// proxyHeaders checks Nova's proxy headers (values as received, one slice
// element per header line) and returns the instance and tenant ids.
func proxyHeaders(ids, tenants, sigs []string, secrets Secrets) (id, tenant string, err *identifyError) {
	switch {
	case len(ids) == 0:
		return "", "", errMissingInstanceID
	case len(sigs) == 0:
		return "", "", errMissingSignature
	case len(tenants) == 0:
		return "", "", errMissingTenantID
	case len(ids) > 1:
		return "", "", errMultiInstanceID
	case len(tenants) > 1:
		return "", "", errMultiTenantID
	case len(sigs) > 1:
		return "", "", errMultiSignature
	}
	if !validSignature(ids[0], sigs[0], secrets) {
		return "", "", errBadSignature
	}
	return ids[0], tenants[0], nil
}

// Signature returns Nova's X-Instance-ID-Signature for an instance id: the
// hex HMAC-SHA256 of the id with the shared secret.
func Signature(secret []byte, instanceID string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(instanceID))
	return hex.EncodeToString(m.Sum(nil))
}

// validSignature reports whether sig is the signature of id under any of
// the secrets. Each comparison is constant-time (hmac.Equal), and every
// secret is tried, so the time taken tells nothing about which one
// matched or how much of a wrong signature was right.
func validSignature(id, sig string, secrets Secrets) bool {
	var want [2 * sha256.Size]byte
	ok := false
	var sum [sha256.Size]byte
	for _, key := range secrets.All() {
		m, pool := getMAC(key)
		m.Write([]byte(id))
		hex.Encode(want[:], m.Sum(sum[:0]))
		putMAC(m, pool)
		if hmac.Equal(want[:], []byte(sig)) {
			ok = true
		}
	}
	return ok
}

// forwardedClient returns the guest a trusted proxy names in
// X-Forwarded-For (values as received, one element per header line): the
// right-most entry outside the trusted proxy networks, i.e. the address
// the last untrusted hop was seen from by the first trusted proxy. An
// entry may carry a port ("192.0.2.1:1234", "[2001:db8::1]:80").
func (s *Server) forwardedClient(values []string) (netip.Addr, *identifyError) {
	switch {
	case len(values) == 0:
		return netip.Addr{}, errNoForwardedFor
	case len(values) > 1:
		return netip.Addr{}, errMultiForwardedFor
	}
	list := values[0]
	if strings.TrimSpace(list) == "" {
		return netip.Addr{}, errBadForwardedFor
	}
	for list != "" {
		entry := list
		if i := strings.LastIndexByte(list, ','); i >= 0 {
			entry, list = list[i+1:], list[:i]
		} else {
			list = ""
		}
		a, ok := parseForwarded(strings.TrimSpace(entry))
		if !ok {
			return netip.Addr{}, errBadForwardedFor
		}
		if !s.trusted(a) {
			return a, nil
		}
	}
	return netip.Addr{}, errProxyForwardedFor
}

// parseForwarded parses one X-Forwarded-For entry, an address with or
// without a port, into an unmapped address without zone.
func parseForwarded(entry string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(entry); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(entry); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// warnProxyAddresses logs an instance whose document claims an address
// inside a trusted proxy network (published by a host that does not trust
// that network, or before it was trusted): that address never identifies
// it here (identify), which its guest will notice; the operator should
// know why. Called once per fill of the instance's view.
func (s *Server) warnProxyAddresses(uuid string, addrs []string) {
	for _, str := range addrs {
		a, err := netip.ParseAddr(str)
		if err != nil {
			continue
		}
		if a = a.Unmap().WithZone(""); s.trusted(a) {
			s.log.Warn("instance claims an address in a trusted proxy network; requests from that address never identify it", "instance", uuid, "address", a.String())
		}
	}
}

// ParsePrefixes parses a comma-separated list of networks (CIDR) or single
// addresses, e.g. "10.0.0.0/8,192.0.2.7,fd00::/8".
func ParsePrefixes(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, err
			}
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, err
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
