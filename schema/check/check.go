// Package check validates device-role-tagging documents without a JSON
// Schema library, for the guest agent, which must start fast: a JSON
// Schema library's own initialisation (meta-schemas parsed and compiled
// at program start) cost most of the agent's start-up under emulation.
//
// Its validators are generated at build time (go generate, from
// ../internal/gen) from the same schema files package schema embeds, as Go
// data that a small interpreter walks; they accept and refuse exactly the
// documents package schema (santhosh-tekuri/jsonschema, the authority the
// host uses) accepts and refuses, which package schema's tests prove over
// the append-only corpus of generated documents, the golden documents and
// a fuzz target. The generator refuses a schema keyword it does not know,
// so a schema change the interpreter cannot follow fails go generate.
//
// It also holds what both packages share and the guest needs: Kind, the
// *Error a refused document yields, and QuoteValue. Package schema aliases
// them, so errors.As with a *schema.Error sees a *check.Error.
package check

//go:generate go run ../internal/gen -o devices_gen.go ../device-role-tagging-1.0.json ../device-role-tagging-1.1.json ../device-role-tagging-1.2.json

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"unicode/utf8"
)

// Kind names a schema.
type Kind string

// The device-role-tagging schemas; package schema documents them.
const (
	DevicesV1  Kind = "device-role-tagging/1.0"
	DevicesV11 Kind = "device-role-tagging/1.1"
	DevicesV12 Kind = "device-role-tagging/1.2"
)

// Has reports whether the package has a validator for kind.
func Has(kind Kind) bool {
	_, ok := generated[kind]
	return ok
}

// Validate checks doc, a value as encoding/json decodes into an any
// (map[string]any, []any, float64 or json.Number, string, bool, nil),
// against the schema of kind. It returns nil if doc is valid, an *Error
// listing the violations if not, and an ordinary error for a kind the
// package has no validator for or a doc holding values that are not JSON
// values.
func Validate(kind Kind, doc any) error {
	n, ok := generated[kind]
	if !ok {
		return fmt.Errorf("schema: unknown kind %q", string(kind))
	}
	if err := checkValues(doc); err != nil {
		return fmt.Errorf("schema: validate %s: %w", kind, err)
	}
	var vs []Violation
	if n.validate(doc, "", &vs) {
		return nil
	}
	return NewError(kind, doc, vs)
}

// ValidateJSON decodes data (numbers as json.Number) and validates it like
// Validate. Data that is not exactly one JSON value, trailing data
// included, is an ordinary error, not an *Error.
func ValidateJSON(kind Kind, data []byte) error {
	if !Has(kind) {
		return fmt.Errorf("schema: unknown kind %q", string(kind))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("schema: decode %s document: %w", kind, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("trailing data after the JSON value")
		}
		return fmt.Errorf("schema: decode %s document: %w", kind, err)
	}
	return Validate(kind, doc)
}

// checkValues fails for a value that is not a JSON value.
func checkValues(v any) error {
	switch v := v.(type) {
	case nil, bool, string, json.Number, float64, float32, int, int8, int32, int64, uint, uint8, uint32, uint64:
		return nil
	case []any:
		for _, e := range v {
			if err := checkValues(e); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		for _, e := range v {
			if err := checkValues(e); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("invalid jsonType: %T", v)
}

// node is one (sub)schema, as the generator writes it. A nil *node is
// the schema true. Only the keywords the device schemas use exist; the
// generator refuses others.
type node struct {
	never      bool     // the schema false
	types      []string // "type"
	required   []string
	props      []prop // "properties", sorted by name
	additional *node  // "additionalProperties"; nil: absent
	items      *node
	allOf      []*node
	ifS        *node
	thenS      *node
	elseS      *node
	hasConst   bool
	constV     scalar
	enum       []scalar
	dependent  []prop // "dependentSchemas", sorted by name
	pattern    *pattern
	minLength  int // -1: absent
	minItems   int // -1: absent
	minimum    string
	maximum    string // "": absent; else a decimal number
}

type prop struct {
	name string
	node *node
}

// scalar is a JSON scalar of a const or an enum: kind is "string",
// "number" (text a decimal), "boolean" (text "true"/"false") or "null".
type scalar struct {
	kind, text string
}

// pattern is a regular expression, compiled by the generator as package
// regexp compiles it (regexp/syntax: Perl syntax, simplified) into a
// program that match runs: no regular expression is compiled in the
// guest.
type pattern struct {
	src   string
	prog  []inst
	start uint32
}

// inst is one instruction of a pattern's program (regexp/syntax.Inst,
// reduced to what the generator lets through).
type inst struct {
	op     uint8
	out    uint32
	arg    uint32 // opAlt: the other branch
	ranges []rune // opRune: lo, hi pairs
}

const (
	opFail uint8 = iota
	opAlt
	opNop
	opMatch
	opBeginText
	opEndText
	opRune
)

// match reports whether s holds a match of the pattern, as
// regexp.MatchString: a Pike VM (every thread in step, O(len(s) ×
// len(prog))), reading s rune by rune as package regexp does (an invalid
// byte is U+FFFD).
func (p *pattern) match(s string) bool {
	n := len(p.prog)
	cur, next := newThreads(n), newThreads(n)
	for pos := 0; ; {
		// A match may start anywhere (the device schemas' patterns
		// begin with ^, whose opBeginText ends threads started later).
		if p.add(cur, p.start, pos, len(s)) {
			return true
		}
		if pos >= len(s) {
			return false
		}
		r, w := utf8.DecodeRuneInString(s[pos:])
		next.clear()
		for _, pc := range cur.dense {
			in := &p.prog[pc]
			if in.op == opRune && inRanges(r, in.ranges) && p.add(next, in.out, pos+w, len(s)) {
				return true
			}
		}
		cur, next = next, cur
		pos += w
	}
}

// add adds the thread at pc and what it reaches without reading at pos
// to t; it reports whether one of them matches.
func (p *pattern) add(t *threads, pc uint32, pos, end int) bool {
	if t.has(pc) {
		return false
	}
	t.put(pc)
	in := &p.prog[pc]
	switch in.op {
	case opMatch:
		return true
	case opAlt:
		return p.add(t, in.out, pos, end) || p.add(t, in.arg, pos, end)
	case opNop:
		return p.add(t, in.out, pos, end)
	case opBeginText:
		return pos == 0 && p.add(t, in.out, pos, end)
	case opEndText:
		return pos == end && p.add(t, in.out, pos, end)
	}
	return false // opRune waits for the next rune; opFail
}

func inRanges(r rune, ranges []rune) bool {
	for i := 0; i+1 < len(ranges); i += 2 {
		if r >= ranges[i] && r <= ranges[i+1] {
			return true
		}
	}
	return false
}

// threads is a sparse set of program counters, in insertion order.
type threads struct {
	sparse []uint32
	dense  []uint32
}

func newThreads(n int) *threads {
	return &threads{sparse: make([]uint32, n), dense: make([]uint32, 0, n)}
}

func (t *threads) has(pc uint32) bool {
	i := t.sparse[pc]
	return int(i) < len(t.dense) && t.dense[i] == pc
}

func (t *threads) put(pc uint32) {
	t.sparse[pc] = uint32(len(t.dense))
	t.dense = append(t.dense, pc)
}

func (t *threads) clear() { t.dense = t.dense[:0] }

// jsonType is the JSON type of v: "null", "boolean", "number", "string",
// "array" or "object" (the generator made sure v is a JSON value).
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "number"
}

// rat is a number's exact value (nil if its text is not a number).
func rat(v any) *big.Rat {
	r, ok := new(big.Rat).SetString(fmt.Sprint(v))
	if !ok {
		return nil
	}
	return r
}

func (s scalar) equal(v any) bool {
	switch s.kind {
	case "null":
		return v == nil
	case "boolean":
		b, ok := v.(bool)
		return ok && (b == (s.text == "true"))
	case "string":
		t, ok := v.(string)
		return ok && t == s.text
	case "number":
		if jsonType(v) != "number" {
			return false
		}
		a, b := rat(v), rat(json.Number(s.text))
		return a != nil && b != nil && a.Cmp(b) == 0
	}
	return false
}

func (s scalar) String() string {
	if s.kind == "string" {
		return fmt.Sprintf("%q", s.text)
	}
	return s.text
}

// validate reports whether v satisfies n; when vs is not nil, it appends
// why not, with ptr the JSON pointer of v.
func (n *node) validate(v any, ptr string, vs *[]Violation) bool {
	if n == nil {
		return true
	}
	add := func(p, msg string) {
		if vs != nil {
			*vs = append(*vs, Violation{Pointer: p, Message: msg})
		}
	}
	if n.never {
		add(ptr, "not allowed")
		return false
	}
	if len(n.types) > 0 {
		t := jsonType(v)
		ok := false
		for _, want := range n.types {
			if t == want || want == "integer" && t == "number" && isInt(v) {
				ok = true
				break
			}
		}
		if !ok {
			add(ptr, fmt.Sprintf("expected %s, but got %s", strings.Join(n.types, " or "), t))
			return false
		}
	}
	valid := true
	fail := func(p, msg string) {
		valid = false
		add(p, msg)
	}
	if n.hasConst && !n.constV.equal(v) {
		fail(ptr, "value must be "+n.constV.String())
	}
	if len(n.enum) > 0 {
		ok := false
		for _, e := range n.enum {
			if e.equal(v) {
				ok = true
				break
			}
		}
		if !ok {
			alts := make([]string, len(n.enum))
			for i, e := range n.enum {
				alts[i] = e.String()
			}
			fail(ptr, "value must be one of "+strings.Join(alts, ", "))
		}
	}
	switch v := v.(type) {
	case map[string]any:
		for _, r := range n.required {
			if _, ok := v[r]; !ok {
				fail(ptr, fmt.Sprintf("missing property %q", r))
			}
		}
		for _, d := range n.dependent {
			if _, ok := v[d.name]; ok && !d.node.validate(v, ptr, vs) {
				valid = false
			}
		}
		for k, pv := range v {
			kp := ptr + "/" + escapeToken(k)
			if p, ok := n.prop(k); ok {
				if !p.validate(pv, kp, vs) {
					valid = false
				}
				continue
			}
			if n.additional != nil {
				if n.additional.never {
					fail(kp, "property not allowed")
				} else if !n.additional.validate(pv, kp, vs) {
					valid = false
				}
			}
		}
	case []any:
		if n.minItems >= 0 && len(v) < n.minItems {
			fail(ptr, fmt.Sprintf("minimum %d items required, but found %d items", n.minItems, len(v)))
		}
		if n.items != nil {
			for i, e := range v {
				if !n.items.validate(e, fmt.Sprintf("%s/%d", ptr, i), vs) {
					valid = false
				}
			}
		}
	case string:
		if n.minLength >= 0 {
			if l := utf8.RuneCountInString(v); l < n.minLength {
				fail(ptr, fmt.Sprintf("length must be >= %d, but got %d", n.minLength, l))
			}
		}
		if n.pattern != nil && !n.pattern.match(v) {
			fail(ptr, QuoteValue(v)+" does not match pattern "+n.pattern.src)
		}
	case nil, bool:
	default: // a number
		if n.minimum != "" || n.maximum != "" {
			x := rat(v)
			if n.minimum != "" && x != nil && x.Cmp(rat(json.Number(n.minimum))) < 0 {
				fail(ptr, fmt.Sprintf("must be >= %s but found %v", n.minimum, v))
			}
			if n.maximum != "" && x != nil && x.Cmp(rat(json.Number(n.maximum))) > 0 {
				fail(ptr, fmt.Sprintf("must be <= %s but found %v", n.maximum, v))
			}
		}
	}
	for _, s := range n.allOf {
		if !s.validate(v, ptr, vs) {
			valid = false
		}
	}
	if n.ifS != nil {
		if n.ifS.validate(v, ptr, nil) {
			if !n.thenS.validate(v, ptr, vs) {
				valid = false
			}
		} else if !n.elseS.validate(v, ptr, vs) {
			valid = false
		}
	}
	return valid
}

// prop returns the schema of property name.
func (n *node) prop(name string) (*node, bool) {
	for _, p := range n.props {
		if p.name == name {
			return p.node, true
		}
	}
	return nil, false
}

// isInt reports whether a number has an integral value (1.0 and 1e2 do,
// as for JSON Schema).
func isInt(v any) bool {
	r := rat(v)
	return r != nil && r.IsInt()
}
