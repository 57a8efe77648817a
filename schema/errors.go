package schema

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Error is returned by Validate and ValidateJSON for a document that does
// not satisfy its schema.
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
		b.WriteString(displayPointer(v.Pointer))
		b.WriteString(": ")
		b.WriteString(v.Message)
	}
	return b.String()
}

func displayPointer(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}

// violations flattens the library's tree of errors into its leaves, with
// messages that name the offending value where that helps.
func violations(ve *jsonschema.ValidationError, doc any) []Violation {
	out := collect(ve, doc, nil)
	for i := range out {
		switch v := lookup(doc, out[i].Pointer).(type) {
		case map[string]any, []any:
		default:
			out[i].Value = v
		}
	}
	slices.SortFunc(out, func(a, b Violation) int {
		if c := comparePointers(a.Pointer, b.Pointer); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	return slices.Compact(out)
}

func collect(ve *jsonschema.ValidationError, doc any, out []Violation) []Violation {
	if len(ve.Causes) == 0 {
		return leaf(ve, doc, out)
	}
	switch keyword(ve.KeywordLocation) {
	case "anyOf", "oneOf":
		// The branches' errors alone would each look like the problem;
		// report them together, as alternatives.
		return append(out, alternatives(ve, doc))
	}
	for _, c := range ve.Causes {
		out = collect(c, doc, out)
	}
	return out
}

func alternatives(ve *jsonschema.ValidationError, doc any) Violation {
	ptr := pointer(ve.InstanceLocation)
	var alts []Violation
	for _, c := range ve.Causes {
		alts = collect(c, doc, alts)
	}
	msgs := make([]string, len(alts))
	for i, a := range alts {
		msgs[i] = a.Message
		if a.Pointer != ptr {
			msgs[i] = strings.TrimPrefix(a.Pointer, ptr) + ": " + a.Message
		}
	}
	return Violation{Pointer: ptr, Message: "matches no alternative: " + strings.Join(msgs, " | ")}
}

// leaf turns one leaf error into violations. The library's messages for
// "required" and "additionalProperties" name several properties at once;
// they become one violation per property.
func leaf(ve *jsonschema.ValidationError, doc any, out []Violation) []Violation {
	ptr := pointer(ve.InstanceLocation)
	msg := ve.Message
	switch keyword(ve.KeywordLocation) {
	case "required":
		if names := quotedNames(strings.TrimPrefix(msg, "missing properties:")); len(names) > 0 {
			for _, n := range names {
				out = append(out, Violation{Pointer: ptr, Message: fmt.Sprintf("missing property %q", n)})
			}
			return out
		}
	case "additionalProperties":
		if names := quotedNames(msg); len(names) > 0 {
			for _, n := range names {
				out = append(out, Violation{Pointer: ptr + "/" + escapeToken(n), Message: "property not allowed"})
			}
			return out
		}
	case "pattern":
		if v, ok := lookup(doc, ptr).(string); ok {
			p := strings.TrimPrefix(msg, "does not match pattern ")
			if names := quotedNames(p); len(names) == 1 {
				p = names[0]
			}
			msg = QuoteValue(v) + " does not match pattern " + p
		}
	case "format":
		if v, ok := lookup(doc, ptr).(string); ok {
			if i := strings.LastIndex(msg, " is not valid "); i >= 0 {
				if names := quotedNames(msg[i:]); len(names) == 1 {
					msg = QuoteValue(v) + " is not a valid " + names[0]
				}
			}
		}
	}
	if strings.Contains(ve.KeywordLocation, "/propertyNames/") {
		msg = "property name: " + msg
	}
	return append(out, Violation{Pointer: ptr, Message: msg})
}

// keyword returns the last element of a keyword location.
func keyword(loc string) string {
	return loc[strings.LastIndexByte(loc, '/')+1:]
}

// pointer turns the library's instance location, whose tokens are JSON
// pointer tokens additionally URL-path-escaped, into a plain JSON pointer.
func pointer(loc string) string {
	if !strings.Contains(loc, "%") {
		return loc
	}
	toks := strings.Split(loc, "/")
	for i, t := range toks {
		if u, err := url.PathUnescape(t); err == nil {
			toks[i] = u
		}
	}
	return strings.Join(toks, "/")
}

var (
	tokenEscaper   = strings.NewReplacer("~", "~0", "/", "~1")
	tokenUnescaper = strings.NewReplacer("~1", "/", "~0", "~")
)

func escapeToken(s string) string { return tokenEscaper.Replace(s) }

// lookup returns the value at JSON pointer ptr in doc, or nil.
func lookup(doc any, ptr string) any {
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

// quotedNames extracts the strings the library quoted in a message. The
// library quotes with %q, then turns the double quotes into single quotes:
// `\"` becomes `"` and `'` becomes `\'`. This undoes that.
func quotedNames(msg string) []string {
	var names []string
	for {
		start := strings.IndexByte(msg, '\'')
		if start < 0 {
			return names
		}
		msg = msg[start+1:]
		var b strings.Builder
		b.WriteByte('"')
		closed := false
		for i := 0; i < len(msg); i++ {
			c := msg[i]
			switch {
			case c == '\\' && i+1 < len(msg):
				i++
				if msg[i] == '\'' {
					b.WriteByte('\'')
				} else {
					b.WriteByte('\\')
					b.WriteByte(msg[i])
				}
				continue
			case c == '"':
				b.WriteString(`\"`)
				continue
			case c == '\'':
				closed = true
			}
			if closed {
				msg = msg[i+1:]
				break
			}
			b.WriteByte(c)
		}
		if !closed {
			return names
		}
		b.WriteByte('"')
		name, err := strconv.Unquote(b.String())
		if err != nil {
			return names
		}
		names = append(names, name)
	}
}
