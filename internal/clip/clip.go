// Package clip cuts values that come from outside — a request path, a
// header, a spec field — to a bounded length before they go into a log
// line, an error message or an error body. Every such value goes through
// String (or Quote, or Any), so that a 1 MB path or a 900 KB user_data is
// never copied whole into a log or an answer: what is kept is the start
// of the value and its length. (Package schema, which imports nothing of
// vmeta, has its own schema.QuoteValue for its messages; a test keeps it
// cutting exactly as Quote does.)
package clip

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Limits, in runes, of what String keeps.
const (
	// Value bounds a value quoted in an error message or returned in an
	// error body (a spec field's value).
	Value = 64
	// Log bounds a request value (a path, a header, a name) in a log line
	// or an error message.
	Log = 256
	// Message bounds a whole error message in a log line or an error body
	// (it may quote several values, each cut already).
	Message = 4096
)

// head returns the first max runes of s, and whether that is less than s.
// It never splits a rune.
func head(s string, max int) (string, bool) {
	n := 0
	for i := range s {
		if n == max {
			return s[:i], true
		}
		n++
	}
	return s, false
}

// String returns s whole when it has at most max runes, else its first
// max runes followed by "… (N bytes)".
func String(s string, max int) string {
	h, cut := head(s, max)
	if !cut {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", h, len(s))
}

// Quote is String with the kept part quoted (strconv.Quote), so that the
// reader sees where the value ends and the cut begins.
func Quote(s string, max int) string {
	h, cut := head(s, max)
	if !cut {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(h), len(s))
}

// Any bounds a value of any type for an error body: a string is cut by
// String, numbers, booleans and nil stay as they are, and anything else
// (an object, an array) stays when its JSON has at most max bytes and is
// replaced by its JSON cut by String otherwise.
func Any(v any, max int) any {
	switch v := v.(type) {
	case nil, bool, int, int64, uint64, float64, json.Number:
		return v
	case string:
		return String(v, max)
	case fmt.Stringer:
		return String(v.String(), max)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return String(fmt.Sprint(v), max)
	}
	if len(b) <= max {
		return v
	}
	return String(string(b), max)
}
