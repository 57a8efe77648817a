package udev

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Tags are free-form strings; udev symlink names, property values and
// interface names are not. EncodeTag maps a tag to a string that is safe
// everywhere the agent writes one, with udev's own escape: the one
// /dev/disk/by-label uses (encode_devnode_name), every byte that is not
// an ASCII letter or digit, one of "#+-.:=@_", or part of a valid
// multi-byte UTF-8 sequence becomes \xHH (lower-case hex). So
// "db/primary logs" is "db\x2fprimary\x20logs", and a tag never creates a
// subdirectory, splits into two links (udev separates links by spaces)
// or reaches udev's substitutions ($, %), globs or quoting (", \).
//
// The encoding is injective (a backslash is itself encoded) and
// DecodeTag reverses it. "." and ".." would name directories; their dots
// are encoded too.
//
// udev rule strings keep backslashes literally (only \" is special, and a
// " is always encoded), so the encoded form is what appears in the rules
// file, in the VMETA_TAGS property (tags separated by spaces) and in the
// link name under /dev/disk/by-tag/.
func EncodeTag(tag string) string {
	if tag == "." || tag == ".." {
		return strings.Repeat(`\x2e`, len(tag))
	}
	return encode(tag, func(c byte) bool {
		return isAlnum(c) || strings.IndexByte("#+-.:=@_", c) >= 0
	}, true)
}

// AltName returns the alternative interface name for tag: the tag
// encoded like EncodeTag but also encoding ':' and keeping no non-ASCII
// byte (the kernel refuses ':' and white space in interface names, and
// counts 0xa0 as a space), at most 127 bytes (ALTIFNAMSIZ - 1).
func AltName(tag string) (string, error) {
	var n string
	if tag == "." || tag == ".." {
		n = strings.Repeat(`\x2e`, len(tag))
	} else {
		n = encode(tag, func(c byte) bool {
			return isAlnum(c) || strings.IndexByte("#+-.=@_", c) >= 0
		}, false)
	}
	if len(n) > MaxAltName {
		return "", fmt.Errorf("tag %q: its interface name would be %d bytes, more than %d", tag, len(n), MaxAltName)
	}
	return n, nil
}

// MaxAltName is the longest alternative interface name Linux takes.
const MaxAltName = 127

// MaxLinkName bounds an encoded tag used as a link name, leaving room for
// "-part" and a partition number within NAME_MAX (255).
const MaxLinkName = 240

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

const hexDigits = "0123456789abcdef"

func encode(s string, keep func(byte) bool, utf8ok bool) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if keep(c) {
			b.WriteByte(c)
			i++
			continue
		}
		if utf8ok && c >= 0x80 {
			if r, size := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError && size > 1 {
				b.WriteString(s[i : i+size])
				i += size
				continue
			}
		}
		b.WriteString(`\x`)
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
		i++
	}
	return b.String()
}

// DecodeTag reverses EncodeTag (and AltName).
func DecodeTag(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) || s[i+1] != 'x' {
			return "", errors.New("bad escape in " + strconv.Quote(s))
		}
		v, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
		if err != nil {
			return "", errors.New("bad escape in " + strconv.Quote(s))
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// SplitTags splits a VMETA_TAGS value into decoded tags; entries that do
// not decode are kept as they are.
func SplitTags(v string) []string {
	f := strings.Fields(v)
	for i, t := range f {
		if d, err := DecodeTag(t); err == nil {
			f[i] = d
		}
	}
	return f
}
