package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/schema"
)

// withRuleErrors adds to a spec's schema errors the errors of the rules
// (Validate) on what remains of the spec once every value the schema
// refused is taken out, so that a spec is refused with every problem
// listed, not only the schema's. A value the schema refused is not
// checked again: a rule error on it, or under it, is left out (its
// schema error says what is wrong). When the document as a whole is
// wrong (not an object), the schema errors are all there is.
func withRuleErrors(js []byte, se *schema.Error) *SpecError {
	out := specErrorFromSchema(se)
	var covered []string // fields the schema errors are about
	var prune []string   // pointers of the values the schema refused
	for _, v := range se.Violations {
		if name, ok := missingProperty(v.Message); ok {
			covered = append(covered, pointerToField(v.Pointer+"/"+escapePointerToken(name)))
			continue
		}
		if v.Pointer == "" {
			return out
		}
		covered = append(covered, pointerToField(v.Pointer))
		prune = append(prune, v.Pointer)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return out
	}
	if _, ok := doc.(map[string]any); !ok {
		return out
	}
	for _, p := range prune {
		doc = removeAt(doc, p)
	}
	rest, err := json.Marshal(doc)
	if err != nil {
		return out
	}
	var in Instance
	dec = json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return out // a schema that drifted from the Go types: its errors alone
	}
	in.Normalize()
	var ruleErr *SpecError
	if !errors.As(in.Validate(), &ruleErr) {
		return out
	}
	for _, fe := range ruleErr.Errors {
		if !slices.ContainsFunc(covered, func(c string) bool { return within(fe.Field, c) }) {
			out.Errors = append(out.Errors, fe)
		}
	}
	return out
}

// missingProperty returns the property a "missing property" violation
// names (schema.Error's form: `missing property "mac"`).
func missingProperty(msg string) (string, bool) {
	q, ok := strings.CutPrefix(msg, "missing property ")
	if !ok {
		return "", false
	}
	name, err := strconv.Unquote(q)
	return name, err == nil
}

func escapePointerToken(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// within reports whether field is c or lies under it ("disks[1].tag" is
// within "disks[1]" and "disks", not within "disk").
func within(field, c string) bool {
	if c == "(document)" {
		return true
	}
	rest, ok := strings.CutPrefix(field, c)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}

// removeAt takes the value at JSON pointer ptr out of doc: an object's
// member is deleted, an array's element becomes null (so the indexes of
// the others, which errors name, do not move). A pointer that names
// nothing leaves doc as it is.
func removeAt(doc any, ptr string) any {
	toks := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	cur := doc
	for i, tok := range toks {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		last := i == len(toks)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				delete(c, tok)
				return doc
			}
			cur = c[tok]
		case []any:
			n, err := strconv.Atoi(tok)
			if err != nil || n < 0 || n >= len(c) {
				return doc
			}
			if last {
				c[n] = nil
				return doc
			}
			cur = c[n]
		default:
			return doc
		}
	}
	return doc
}
