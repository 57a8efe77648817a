package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// TokenPolicy says whether an instance's requests must carry a session
// token (IMDSv2 style, PUT /latest/api/token).
type TokenPolicy string

const (
	// TokenOptional: a request may omit the token; a token that is sent
	// must be valid (else 401). The default: cloud-init's OpenStack
	// datasource does not ask for tokens.
	TokenOptional TokenPolicy = "optional"
	// TokenRequired: every request for instance data needs a valid token
	// (missing, unknown, expired, or another instance's or address's
	// token: 401). "GET /" (the version list) stays open. Tokens can only
	// be had directly (a token PUT with X-Forwarded-For is refused), so
	// this policy suits guests that reach the service without a proxy.
	TokenRequired TokenPolicy = "required"
)

// ParseTokenPolicy parses "optional" or "required" ("" is optional).
func ParseTokenPolicy(s string) (TokenPolicy, error) {
	switch TokenPolicy(s) {
	case "", TokenOptional:
		return TokenOptional, nil
	case TokenRequired:
		return TokenRequired, nil
	}
	return "", fmt.Errorf("token policy %q: must be optional or required", s)
}

// MaxTokenTTL is the longest token lifetime a guest may ask for, in
// seconds (6 hours, as on AWS; cloud-init asks for exactly this).
const MaxTokenTTL = 21600

// A token is base64url (no padding) of
//
//	version (1 byte) | expiry, Unix seconds (8) | random nonce (16) | MAC (32)
//
// where MAC = HMAC-SHA256(key, tokenDomain | uuid | 0 | address (16) |
// version | expiry | nonce). The instance UUID and the source address the
// token was minted for are bound by the MAC but not carried, so a token
// says nothing about whom it belongs to, and a token presented by another
// instance or from another address does not verify. Tokens are stateless:
// any replica holding the key verifies them; they cannot be revoked before
// they expire except by retiring the key.
const (
	tokenVersion = 1
	tokenBodyLen = 1 + 8 + 16
	tokenRawLen  = tokenBodyLen + sha256.Size
	tokenLen     = (tokenRawLen*8 + 5) / 6 // base64, no padding
	tokenDomain  = "vmeta-metadata-token-v1"
)

type tokenMinter struct {
	keys Secrets
	now  func() time.Time

	mu   sync.Mutex // guards rand (an arbitrary reader need not be safe for concurrent use)
	rand io.Reader
}

func tokenMAC(key []byte, uuid string, addr netip.Addr, body []byte, out []byte) []byte {
	m, pool := getMAC(key)
	defer putMAC(m, pool)
	var buf [128]byte
	msg := append(buf[:0], tokenDomain...)
	msg = append(msg, uuid...)
	msg = append(msg, 0)
	a := [16]byte{}
	if addr.IsValid() {
		a = addr.As16()
	}
	msg = append(msg, a[:]...)
	msg = append(msg, body...)
	m.Write(msg)
	return m.Sum(out)
}

// mint returns a new token for an instance calling from addr, valid for
// ttl seconds, signed with the current key.
func (t *tokenMinter) mint(uuid string, addr netip.Addr, ttl int) (string, error) {
	key := t.keys.Current()
	if len(key) == 0 {
		return "", fmt.Errorf("mint token: no token key")
	}
	var raw [tokenRawLen]byte
	raw[0] = tokenVersion
	binary.BigEndian.PutUint64(raw[1:9], uint64(t.now().Unix()+int64(ttl)))
	t.mu.Lock()
	_, err := io.ReadFull(t.rand, raw[9:tokenBodyLen])
	t.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	tokenMAC(key, uuid, addr, raw[:tokenBodyLen], raw[tokenBodyLen:tokenBodyLen])
	return base64.RawURLEncoding.EncodeToString(raw[:]), nil
}

// valid reports whether tok is an unexpired token minted for uuid and
// addr under any of the keys (constant-time MAC comparison).
func (t *tokenMinter) valid(tok string, uuid string, addr netip.Addr) bool {
	if len(tok) != tokenLen {
		return false
	}
	var raw [tokenRawLen]byte
	if n, err := base64.RawURLEncoding.Decode(raw[:], []byte(tok)); err != nil || n != tokenRawLen {
		return false
	}
	if raw[0] != tokenVersion {
		return false
	}
	ok := false
	var sum [sha256.Size]byte
	for _, key := range t.keys.All() {
		if hmac.Equal(tokenMAC(key, uuid, addr, raw[:tokenBodyLen], sum[:0]), raw[tokenBodyLen:]) {
			ok = true
		}
	}
	if !ok {
		return false
	}
	expiry := int64(binary.BigEndian.Uint64(raw[1:9]))
	return t.now().Unix() < expiry
}

// parseTTL parses X-aws-ec2-metadata-token-ttl-seconds: a decimal number
// of seconds from 1 to MaxTokenTTL.
func parseTTL(values []string) (int, bool) {
	if len(values) != 1 {
		return 0, false
	}
	v := values[0]
	if v == "" || len(v) > 5 {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxTokenTTL {
		return 0, false
	}
	return n, true
}
