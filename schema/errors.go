package schema

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/vmeta/vmeta/schema/check"
)

// Error is returned by Validate and ValidateJSON for a document that does
// not satisfy its schema. It is check.Error: the guest agent's validator
// (package check, generated from the same schema files) returns the same
// type.
type Error = check.Error

// Violation is one problem in a document; see check.Violation.
type Violation = check.Violation

// collect flattens the library's tree of errors into its leaves, with
// messages that name the offending value where that helps (check.NewError
// then sets their values, sorts them and drops duplicates).
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
		if v, ok := check.Lookup(doc, ptr).(string); ok {
			p := strings.TrimPrefix(msg, "does not match pattern ")
			if names := quotedNames(p); len(names) == 1 {
				p = names[0]
			}
			msg = QuoteValue(v) + " does not match pattern " + p
		}
	case "format":
		if v, ok := check.Lookup(doc, ptr).(string); ok {
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

var tokenEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapeToken(s string) string { return tokenEscaper.Replace(s) }

// MaxQuoted bounds the runes of a value QuoteValue quotes whole.
const MaxQuoted = check.MaxQuoted

// QuoteValue quotes s, a value from user input, for an error message: whole
// when it has at most MaxQuoted runes, else its first MaxQuoted runes
// followed by "… (N bytes)". See check.QuoteValue.
func QuoteValue(s string) string { return check.QuoteValue(s) }

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
