package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/vmeta/vmeta/schema"
)

// MaxSpecSize bounds a spec document; user data (64 KiB in Nova) dominates.
const MaxSpecSize = 1 << 20

// ParseSpec decodes an instance spec written as YAML or JSON, checks it
// against the instance-spec schema and the rules of Validate, and returns
// the normalized instance. Every error is a *SpecError naming the field, the
// value and the rule, except for documents that are not YAML/JSON at all.
func ParseSpec(data []byte) (*Instance, error) {
	if len(data) > MaxSpecSize {
		return nil, &SpecError{Errors: []FieldError{{Field: "(document)", Value: len(data), Rule: fmt.Sprintf("spec is larger than %d bytes", MaxSpecSize)}}}
	}
	// A JSON spec is checked against the bounds (bounds.go) before the
	// YAML reader, which costs a hundred times its size in memory, reads
	// it.
	if err := checkJSONInput(data); err != nil {
		return nil, err
	}
	// YAMLToJSONStrict refuses duplicate keys, which plain YAML decoding
	// would silently resolve to the last one.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, &SpecError{Errors: []FieldError{{Field: "(document)", Rule: "not valid YAML or JSON: " + err.Error()}}}
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil, &SpecError{Errors: []FieldError{{Field: "(document)", Rule: "spec is empty"}}}
	}
	// Depth and free-form sizes first (bounds.go): nothing else reads a
	// document past them.
	if err := checkDocument(js); err != nil {
		return nil, err
	}
	if err := schema.ValidateJSON(schema.InstanceSpec, js); err != nil {
		var se *schema.Error
		if errors.As(err, &se) {
			return nil, withRuleErrors(js, se) // schemarules.go
		}
		return nil, fmt.Errorf("validate spec: %w", err)
	}
	var in Instance
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		// The schema rejects unknown fields and wrong types first; this is
		// a safety net for a schema that drifted from the Go types.
		return nil, &SpecError{Errors: []FieldError{{Field: "(document)", Rule: err.Error()}}}
	}
	markUnencrypted(js, &in)
	in.Normalize()
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return &in, nil
}

// specErrorFromSchema turns schema violations (JSON pointers) into field
// errors.
func specErrorFromSchema(se *schema.Error) *SpecError {
	out := &SpecError{}
	for _, v := range se.Violations {
		out.Errors = append(out.Errors, FieldError{Field: pointerToField(v.Pointer), Value: v.Value, Rule: schemaRule(v.Pointer, v.Value, v.Message)})
	}
	return out
}

// shareTagPointer matches the JSON pointer of a share's tag.
var shareTagPointer = regexp.MustCompile(`^/shares/[0-9]+/tag$`)

// schemaRule is the rule a schema violation reports: the schema's own
// message, or for a share tag the share tag rule with its reason (the
// schema's pattern alone does not say why a tag is limited to 36 bytes).
func schemaRule(ptr string, value any, msg string) string {
	if tag, ok := value.(string); ok && shareTagPointer.MatchString(ptr) {
		if err := ValidateShareTag(tag); err != nil {
			return err.Error()
		}
	}
	return msg
}

// pointerToField renders "/disks/1/tag" as "disks[1].tag".
func pointerToField(ptr string) string {
	if ptr == "" || ptr == "/" {
		return "(document)"
	}
	var b strings.Builder
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}
