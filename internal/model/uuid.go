package model

import "strings"

// IsUUID reports whether s is a UUID in its string form: 8-4-4-4-12
// hexadecimal digits, in either case. RFC 4122 (section 3) has UUIDs
// "case insensitive on input" and lower case on output: every vmeta check
// of a UUID accepts both cases through IsUUID, and what vmeta stores,
// names records by and compares is CanonicalUUID's lower-case form.
func IsUUID(s string) bool {
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

// CanonicalUUID returns the UUID s in lower case, and false when s is not
// a UUID (IsUUID).
func CanonicalUUID(s string) (string, bool) {
	if !IsUUID(s) {
		return "", false
	}
	return strings.ToLower(s), true
}
