// Package uuid is vmeta's one check of a UUID's text form, for the host
// and the guest agent alike (it imports nothing of vmeta, and compiles no
// regular expression).
package uuid

import "strings"

// Valid reports whether s is a UUID in its string form: 8-4-4-4-12
// hexadecimal digits, in either case. RFC 4122 (section 3) has UUIDs
// "case insensitive on input" and lower case on output: every vmeta check
// of a UUID accepts both cases through Valid, and what vmeta stores,
// names records by and compares is Canonical's lower-case form.
func Valid(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// Canonical returns the UUID s in lower case, and false when s is not a
// UUID (Valid).
func Canonical(s string) (string, bool) {
	if !Valid(s) {
		return "", false
	}
	return strings.ToLower(s), true
}
