package check

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Error is returned for a document that does not satisfy its schema.
type Error struct {
	// Kind is the schema the document was checked against.
	Kind Kind
	// Violations lists every problem, ordered by pointer (array indexes in
	// numeric order), then message.
	Violations []Violation
}

// Violation is one problem in a document.
//
// Pointer is an RFC 6901 JSON pointer into the document, "" for the document
// itself. For a missing required property it points at the object that
// lacks it ("/devices/1", message `missing property "mac"`); for a property
// the schema does not allow it points at that property ("/disks/0/sizee").
type Violation struct {
	Pointer string
	Message string
	// Value is the offending scalar at Pointer (string, json.Number,
	// bool), or nil when the pointer names an object, an array or a
	// missing value.
	Value any
}

// Error lists the violations, each as "pointer: message"; the document
// itself is shown as "(root)".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Kind))
	b.WriteString(": ")
	if len(e.Violations) == 0 {
		b.WriteString("invalid document")
	}
	for i, v := range e.Violations {
		if i > 0 {
			b.WriteString("; ")
		}
		if v.Pointer == "" {
			b.WriteString("(root)")
		} else {
			b.WriteString(v.Pointer)
		}
		b.WriteString(": ")
		b.WriteString(v.Message)
	}
	return b.String()
}

// NewError returns the *Error for violations vs found in doc: each
// violation's Value set from doc, sorted by pointer (array indexes
// numerically), then message, duplicates dropped.
func NewError(kind Kind, doc any, vs []Violation) *Error {
	for i := range vs {
		switch v := Lookup(doc, vs[i].Pointer).(type) {
		case map[string]any, []any:
		default:
			vs[i].Value = v
		}
	}
	slices.SortFunc(vs, func(a, b Violation) int {
		if c := comparePointers(a.Pointer, b.Pointer); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	return &Error{Kind: kind, Violations: slices.CompactFunc(vs, func(a, b Violation) bool {
		return a.Pointer == b.Pointer && a.Message == b.Message
	})}
}

var (
	tokenEscaper   = strings.NewReplacer("~", "~0", "/", "~1")
	tokenUnescaper = strings.NewReplacer("~1", "/", "~0", "~")
)

func escapeToken(s string) string { return tokenEscaper.Replace(s) }

// Lookup returns the value at JSON pointer ptr in doc, or nil.
func Lookup(doc any, ptr string) any {
	if ptr == "" {
		return doc
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[tokenUnescaper.Replace(tok)]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

// comparePointers orders pointers token by token, numeric tokens (array
// indexes) by value, so "/devices/2" sorts before "/devices/10".
func comparePointers(a, b string) int {
	at, bt := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(at) && i < len(bt); i++ {
		if at[i] == bt[i] {
			continue
		}
		an, aerr := strconv.Atoi(at[i])
		bn, berr := strconv.Atoi(bt[i])
		if aerr == nil && berr == nil {
			return cmp.Compare(an, bn)
		}
		return strings.Compare(at[i], bt[i])
	}
	return cmp.Compare(len(at), len(bt))
}

// MaxQuoted bounds the runes of a value QuoteValue quotes whole.
const MaxQuoted = 64

// QuoteValue quotes s, a value from user input, for an error message: whole
// when it has at most MaxQuoted runes, else its first MaxQuoted runes
// followed by "… (N bytes)", so that a 70,000-byte user_data does not fill
// the terminal. The cut never splits a rune.
func QuoteValue(s string) string {
	n := 0
	for i := range s {
		if n == MaxQuoted {
			return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:i]), len(s))
		}
		n++
	}
	return strconv.Quote(s)
}
