package keyrotation

import (
	"fmt"
	"strconv"
	"strings"
)

// Newer reports whether running is a newer vmeta version than minted (the
// version that minted a key), for WithVersionUpgrade. Versions are `git
// describe` strings: "v1.4.0", "v1.4.0-12-g57aaa02" (12 commits after
// v1.4.0), with an optional "-dirty". A development build ("devel…") or
// a version that does not parse never counts as newer — an unplanned
// rotation is worse than a missed one; a key minted by an unknown version
// ("": it existed before rotation was tracked) is older than any release.
func Newer(running, minted string) bool {
	r, ok := parseVersion(running)
	if !ok {
		return false
	}
	if minted == "" {
		return true
	}
	m, ok := parseVersion(minted)
	if !ok {
		return false
	}
	for i := range r {
		if r[i] != m[i] {
			return r[i] > m[i]
		}
	}
	return false
}

// parseVersion parses "vMAJOR.MINOR.PATCH[-N-gHASH][-dirty]" into
// major, minor, patch and N.
func parseVersion(v string) ([4]int, bool) {
	var out [4]int
	v = strings.TrimSuffix(v, "-dirty")
	if !strings.HasPrefix(v, "v") {
		return out, false
	}
	v = v[1:]
	rest := ""
	if i := strings.IndexByte(v, '-'); i >= 0 {
		v, rest = v[:i], v[i+1:]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	if rest != "" {
		n, hash, ok := strings.Cut(rest, "-g")
		c, err := strconv.Atoi(n)
		if !ok || err != nil || c < 0 || hash == "" {
			return out, false
		}
		out[3] = c
	}
	return out, true
}

// ParseFlag parses a --key-rotation value: CLASS=POLICY[,generation=N]
// [,keep-prior=N], e.g. "proxy-secret=KeyGeneration,generation=2,keep-prior=1"
// or "key-encryption-key=WithVersionUpgrade". The short class names kek,
// token, proxy and disk are accepted.
func ParseFlag(s string) (Class, Policy, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return "", Policy{}, fmt.Errorf("%w: %q: must be CLASS=POLICY[,generation=N][,keep-prior=N]", ErrInvalid, s)
	}
	c, err := ParseClassAlias(name)
	if err != nil {
		return "", Policy{}, err
	}
	fields := strings.Split(rest, ",")
	p := Policy{KeyRotationPolicy: PolicyName(fields[0])}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			return "", Policy{}, fmt.Errorf("%w: %s: %s: %q is not a number", ErrInvalid, c, k, v)
		}
		switch k {
		case "generation":
			p.KeyGeneration = int64(n)
		case "keep-prior":
			p.KeepPriorKeyCount = &n
		default:
			return "", Policy{}, fmt.Errorf("%w: %s: unknown field %q (generation, keep-prior)", ErrInvalid, c, k)
		}
	}
	if err := p.Check(c); err != nil {
		return "", Policy{}, err
	}
	return c, p, nil
}

// ParseClassAlias parses a class name or its short alias (kek, token,
// proxy, disk).
func ParseClassAlias(s string) (Class, error) {
	switch s {
	case "kek":
		return KEK, nil
	case "token":
		return Token, nil
	case "proxy":
		return Proxy, nil
	case "disk", "disks":
		return Disk, nil
	}
	return ParseClass(s)
}
