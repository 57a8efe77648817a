package bolt

import "strconv"

// versionFast finds the top-level "version" member of an encoded
// store.Document by scanning the members before it, without a JSON
// decoder: the metadata server's convergence sweep asks for the version
// of every cached document every few seconds, and the decoder cost
// ~50 allocations and ~20 µs per document. ok is false when the scan
// cannot tell (the member is not there, not a plain integer, or the text
// is not what json.Marshal writes); documentVersion then decodes. Like
// the decoder, it reads nothing after the member.
func versionFast(data []byte) (v int64, ok bool) {
	i, ok := memberFast(data, "version")
	if !ok {
		return 0, false
	}
	return parseVersion(data, i)
}

// hostFast finds the top-level "host" member of an encoded
// store.Instance without a JSON decoder: it scans the record's members
// (the spec's text only for its quotes) and decodes none. ok is false
// when the scan cannot tell (no such member: a record written before
// hosts were tracked; an escaped string; the member twice; text
// json.Marshal does not write).
func hostFast(data []byte) (host []byte, ok bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, false
	}
	found := false
	for i++; ; i++ {
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != '"' {
			return nil, false
		}
		end, plain := skipString(data, i)
		if end < 0 || !plain {
			return nil, false
		}
		key := data[i+1 : end-1]
		if i = skipSpace(data, end); i >= len(data) || data[i] != ':' {
			return nil, false
		}
		i = skipSpace(data, i+1)
		if string(key) == "host" {
			if found || i >= len(data) || data[i] != '"' {
				return nil, false
			}
			vend, plain := skipString(data, i)
			if vend < 0 || !plain {
				return nil, false
			}
			host, found = data[i+1:vend-1], true
			i = vend
		} else if i = skipValue(data, i); i < 0 {
			return nil, false
		}
		if i = skipSpace(data, i); i >= len(data) {
			return nil, false
		}
		switch data[i] {
		case '}':
			return host, found && skipSpace(data, i+1) == len(data)
		case ',':
		default:
			return nil, false
		}
	}
}

// memberFast returns where the value of the top-level member name of the
// JSON object data starts, scanning the members before it without a
// decoder; ok is false when the scan cannot tell (see versionFast).
func memberFast(data []byte, name string) (int, bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return 0, false
	}
	i++
	for {
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != '"' {
			return 0, false
		}
		end, plain := skipString(data, i)
		if end < 0 {
			return 0, false
		}
		if !plain {
			return 0, false // an escaped key may spell name: let the decoder say
		}
		key := data[i+1 : end-1]
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return 0, false
		}
		i = skipSpace(data, i+1)
		if string(key) == name {
			return i, true
		}
		if i = skipValue(data, i); i < 0 {
			return 0, false
		}
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != ',' {
			return 0, false
		}
		i++
	}
}

// parseVersion reads the integer at data[i:], which must end the member
// (a comma, a closing brace or space follows).
func parseVersion(data []byte, i int) (int64, bool) {
	j := i
	if j < len(data) && data[j] == '-' {
		j++
	}
	k := j
	for k < len(data) && data[k] >= '0' && data[k] <= '9' {
		k++
	}
	if k == j || (k-j > 1 && data[j] == '0') {
		return 0, false // no digits, or a leading zero (not JSON)
	}
	if t := skipSpace(data, k); t >= len(data) || (data[t] != ',' && data[t] != '}') {
		return 0, false // a fraction, an exponent, or garbage: let the decoder say
	}
	v, err := strconv.ParseInt(string(data[i:k]), 10, 64)
	return v, err == nil
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at data[i]
// (a quote), or -1; plain reports that it holds no escape or control
// character (its bytes are its value).
func skipString(data []byte, i int) (end int, plain bool) {
	plain = true
	for i++; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1, plain
		case c == '\\':
			plain = false
			i++
		case c < 0x20:
			return -1, false
		}
	}
	return -1, false
}

// skipValue returns the index after the value starting at data[i], or
// -1. Objects and arrays are skipped by their brackets (strings in them
// by their quotes); literals and numbers up to the next delimiter.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		end, _ := skipString(data, i)
		return end
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				end, _ := skipString(data, i)
				if end < 0 {
					return -1
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	start := i
	for i < len(data) {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if i == start {
				return -1
			}
			return i
		}
		i++
	}
	return -1
}
