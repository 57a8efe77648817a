package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/vmeta/vmeta/internal/clip"
)

// Bounds of the free-form parts of a spec: the values the schema cannot
// bound because it does not know their shape (vendor_data is any JSON
// object) or counts characters where bytes matter (user_data). They are
// checked on the document itself, before the schema and the decoder see
// it, so that a spec of 54 KB nested 9,000 levels deep is refused at once
// instead of being stored and answered back at the square of its depth.
const (
	// MaxSpecDepth is how deeply any value of a spec may be nested,
	// counting the document itself as level 1 (the spec's own structure
	// takes at most 5: document, nics, a NIC, ips, an address's dns).
	MaxSpecDepth = 32
	// MaxVendorDataBytes bounds vendor_data as compact JSON; Nova's bound
	// of user data, since both reach the guest the same way.
	MaxVendorDataBytes = 65535
	// MaxUserDataBytes is Nova's bound of user data, in bytes (the schema
	// can count only characters).
	MaxUserDataBytes = 65535
	// MaxMetaItems is how many meta entries a spec may have: Nova's
	// default metadata_items quota.
	MaxMetaItems = 128
	// MaxFilesBytes bounds the injected files' contents together.
	MaxFilesBytes = 256 << 10
	// MaxHostCPU is the largest host CPU id dedicated_cpus may name: the
	// Linux kernel supports at most 8192 CPUs (NR_CPUS).
	MaxHostCPU = 8191
	// MaxDiskSize bounds a disk's size: 1 PiB, beyond any real disk and
	// far from the overflow of a 64-bit byte count.
	MaxDiskSize = 1 << 50
)

// checkJSONInput checks the bounds of a spec written as JSON, as it was
// sent: the YAML reader that ParseSpec uses for both forms is slow on
// large documents (two seconds and 120 MB for 900 KB of small objects),
// so what the bounds refuse should not reach it. A YAML spec is checked
// once converted.
func checkJSONInput(data []byte) error {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' || !json.Valid(data) {
		return nil
	}
	return checkDocument(data)
}

// checkDocument checks the bounds of a spec's JSON form: nesting depth
// everywhere, then the size of each free-form field. It stops at the first
// level too deep (nothing below it is read).
func checkDocument(js []byte) error {
	if fe, ok := deepest(js); ok {
		return &SpecError{Errors: []FieldError{fe}}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil // not an object: the schema says so, with a pointer
	}
	var c collector
	if raw, ok := top["vendor_data"]; ok && len(raw) > MaxVendorDataBytes {
		// Measured compact, as the YAML reader writes it.
		var compact bytes.Buffer
		if json.Compact(&compact, raw) == nil && compact.Len() > MaxVendorDataBytes {
			c.add("vendor_data", fmt.Sprintf("(%d bytes of JSON)", compact.Len()), "must be at most %d bytes as JSON", MaxVendorDataBytes)
		}
	}
	if raw, ok := top["user_data"]; ok {
		var s string
		if json.Unmarshal(raw, &s) == nil && len(s) > MaxUserDataBytes {
			c.add("user_data", s, "must be at most %d bytes (Nova's limit)", MaxUserDataBytes)
		}
	}
	if raw, ok := top["meta"]; ok {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil && len(m) > MaxMetaItems {
			c.add("meta", fmt.Sprintf("(%d items)", len(m)), "must have at most %d items (Nova's metadata_items quota)", MaxMetaItems)
		}
	}
	if raw, ok := top["files"]; ok {
		var files []struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &files) == nil {
			n := 0
			for _, f := range files {
				var s string
				if json.Unmarshal(f.Content, &s) == nil {
					n += len(s)
				}
			}
			if n > MaxFilesBytes {
				c.add("files", fmt.Sprintf("(%d bytes of content)", n), "must hold at most %d bytes of content together", MaxFilesBytes)
			}
		}
	}
	return c.err()
}

// deepest reports the first value of js nested deeper than MaxSpecDepth,
// as a field error naming where (the path down to the limit) and the
// limit. It reads tokens, so its cost is linear in the document whatever
// its shape.
func deepest(js []byte) (FieldError, bool) {
	if !tooDeep(js, MaxSpecDepth) {
		return FieldError{}, false
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	// path holds, per open level, the key or index being read.
	type level struct {
		object bool
		key    string
		index  int
		// expectKey: in an object, the next string token is a key.
		expectKey bool
	}
	var stack []level
	field := func() string {
		var b strings.Builder
		for _, l := range stack {
			switch {
			case l.object && l.key != "":
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(l.key)
			case !l.object:
				b.WriteString("[" + strconv.Itoa(l.index) + "]")
			}
		}
		if b.Len() == 0 {
			return "(document)"
		}
		return b.String()
	}
	// valueDone moves the enclosing level past the value just read.
	valueDone := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].expectKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil { // the end, or a syntax error: the decoder's to report
			return FieldError{}, false
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) == MaxSpecDepth {
					return FieldError{Field: clip.String(field(), clip.Log), Rule: fmt.Sprintf("is nested more than %d levels deep (the limit of any value in a spec)", MaxSpecDepth)}, true
				}
				stack = append(stack, level{object: t == '{', expectKey: t == '{'})
			case '}', ']':
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
				stack[n-1].key, stack[n-1].expectKey = t, false
				continue
			}
			valueDone()
		default:
			valueDone()
		}
	}
}

// tooDeep reports whether valid JSON js nests objects and arrays more than
// limit levels deep: a scan of its bytes, so that the common case costs
// little; deepest then walks the tokens to name the field.
func tooDeep(js []byte, limit int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range js {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > limit {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// checkText refuses the characters that would corrupt or disguise a value
// written into a file, a log line or a terminal: control characters (C0,
// DEL, C1) and the Unicode bidirectional formatting characters, with
// which a value can display as something else (the "Trojan Source"
// characters: U+202A–U+202E, U+2066–U+2069, and the marks U+200E, U+200F,
// U+061C).
func checkText(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("must be valid UTF-8")
	}
	for _, r := range s {
		switch {
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			return fmt.Errorf("must not contain control characters (%U)", r)
		case r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
			return fmt.Errorf("must not contain bidirectional formatting characters (%U)", r)
		}
	}
	return nil
}

// ParseDiskSize returns the bytes of a disk size as qemu-img takes it and
// the spec schema allows it: a byte count with an optional K, M, G or T
// suffix (powers of 1024), at most MaxDiskSize.
func ParseDiskSize(size string) (int64, error) {
	digits, shift := size, 0
	if n := len(size); n > 0 {
		switch size[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			digits = size[:n-1]
		}
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, errors.New("must be a byte count with an optional K, M, G or T suffix")
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n > MaxDiskSize>>shift {
		return 0, fmt.Errorf("must be at most %d bytes (1P)", int64(MaxDiskSize))
	}
	return int64(n << shift), nil
}

// checkImageName checks a spec's image: the name of an image in the host's
// image directory, never a path (an absolute one, or one climbing out with
// ".."), whatever the hypervisor.
func checkImageName(name string) error {
	if name == "" {
		return nil
	}
	if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return errors.New("must name an image in the host's image directory: a file name, without '/' or '\\', not starting with '.'")
	}
	return checkText(name)
}

// isUnicastMAC reports whether mac (a valid MAC address) can be a NIC's
// own address: not multicast or broadcast (the low bit of the first octet
// set) and not all zeros.
func isUnicastMAC(mac string) bool {
	hw, err := ParseMAC(mac)
	if err != nil {
		return false
	}
	return hw[0]&1 == 0 && !bytes.Equal(hw, make([]byte, 6))
}

// validateInputs adds the bounds of the fields that come straight from
// the spec's author: meta characters, NIC MACs, disk sizes, dedicated CPU
// ids and the image name. Validate calls it.
func (in *Instance) validateInputs(c *collector) {
	for _, k := range slices.Sorted(maps.Keys(in.Meta)) {
		if err := checkText(k); err != nil {
			// The key is the value here: a field name is not quoted.
			c.add("meta", k, "key %v", err)
			continue
		}
		if err := checkText(in.Meta[k]); err != nil {
			c.add("meta."+k, in.Meta[k], "%v", err)
		}
	}
	for i, n := range in.NICs {
		if IsMAC(n.MAC) && !isUnicastMAC(n.MAC) {
			c.add(fmt.Sprintf("nics[%d].mac", i), n.MAC, "must be a unicast address (the low bit of the first octet clear, not all zeros)")
		}
	}
	for i, d := range in.Disks {
		if d.Size == "" {
			continue
		}
		if _, err := ParseDiskSize(d.Size); err != nil {
			c.add(fmt.Sprintf("disks[%d].size", i), d.Size, "%v", err)
		}
	}
	for i, cpu := range in.DedicatedCPUs {
		if cpu < 0 || cpu > MaxHostCPU {
			c.add(fmt.Sprintf("dedicated_cpus[%d]", i), cpu, "must be a host CPU id from 0 to %d", MaxHostCPU)
		}
	}
	if err := checkImageName(in.Image); err != nil {
		c.add("image", in.Image, "%v", err)
	}
}
