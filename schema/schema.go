// Package schema holds vmeta's JSON Schemas and validates documents against
// them.
//
// Four schemas are embedded, each named by a Kind:
//
//   - DevicesV1: the device role tagging document ("devices" in
//     meta_data.json) of Nova's virt-device-tagged-attach-detach
//     specification, with the specification's broken schema corrected;
//   - DevicesV11: its append-only successor (disk "encrypted", "share"
//     devices), which accepts every document DevicesV1 accepts;
//   - DevicesV12: the successor of DevicesV11 (tagged "pci" passthrough
//     devices), which accepts every document DevicesV11 accepts;
//   - InstanceSpec: the instance spec an operator writes (model.Instance as
//     JSON).
//
// The schemas are JSON Schema draft 2020-12 with format assertions on. Each
// is compiled once, on its first use; the compiled schemas are read-only,
// so Validate and ValidateJSON are safe for concurrent use. An invalid document
// yields an *Error listing every violation with a JSON pointer into the
// document.
//
// This package (santhosh-tekuri/jsonschema) is the authority the host
// uses. The guest agent validates device documents with package check
// instead, whose validators are generated from the same files (go
// generate ./schema/check); TestCheckAgreesWithSchema and
// FuzzCheckAgreesWithSchema prove that both accept and refuse the same
// documents. After changing a device schema, run go generate.
package schema

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/vmeta/vmeta/schema/check"
)

// Kind names a schema. It is check.Kind, which the guest agent uses
// without this package.
type Kind = check.Kind

// The schemas this package knows.
const (
	// DevicesV1 is the device role tagging schema of the specification,
	// corrected.
	DevicesV1 Kind = check.DevicesV1
	// DevicesV11 is the append-only successor of DevicesV1: disks may carry
	// "encrypted" (a boolean) and there is a "share" device type.
	DevicesV11 Kind = check.DevicesV11
	// DevicesV12 is the append-only successor of DevicesV11: there is a
	// "pci" device type (a tagged passthrough device and its guest
	// address).
	DevicesV12 Kind = check.DevicesV12
	// InstanceSpec is the instance spec users write (model.Instance as
	// JSON).
	InstanceSpec Kind = "instance-spec/1"
)

//go:embed device-role-tagging-1.0.json device-role-tagging-1.1.json device-role-tagging-1.2.json instance-spec-1.json
var files embed.FS

// fileOf maps each kind to its schema file.
var fileOf = map[Kind]string{
	DevicesV1:    "device-role-tagging-1.0.json",
	DevicesV11:   "device-role-tagging-1.1.json",
	DevicesV12:   "device-role-tagging-1.2.json",
	InstanceSpec: "instance-spec-1.json",
}

// compiled holds one compiler run per kind, made on the first Validate
// of that kind: a program that validates one kind (the guest agent reads
// only device metadata) never pays for compiling the others, which under
// emulation (TCG) costs a noticeable part of the agent's start-up. The
// schemas are part of the program, so a failure is a programming error.
var compiled = func() map[Kind]func() *jsonschema.Schema {
	out := make(map[Kind]func() *jsonschema.Schema, len(fileOf))
	for kind := range fileOf {
		out[kind] = sync.OnceValue(func() *jsonschema.Schema {
			s, err := compile(kind)
			if err != nil {
				panic(fmt.Sprintf("schema: embedded schema %s does not compile: %v", fileOf[kind], err))
			}
			return s
		})
	}
	return out
}()

// compile compiles the schema of kind. Every schema is self-contained, so
// only its own file is added to the compiler.
func compile(kind Kind) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	// Every schema is self-contained; never fetch anything.
	c.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("schema: refusing to load %s: only embedded schemas are used", u)
	}
	name := fileOf[kind]
	raw, err := files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var head struct {
		ID string `json:"$id"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if head.ID == "" {
		return nil, fmt.Errorf("%s: no $id", name)
	}
	if err := c.AddResource(head.ID, bytes.NewReader(raw)); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s, err := c.Compile(head.ID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

func unknownKind(kind Kind) error {
	return fmt.Errorf("schema: unknown kind %q", string(kind))
}

// Validate checks doc against the schema of kind. doc is a value as
// encoding/json decodes into an any: map[string]any, []any, float64 or
// json.Number, string, bool and nil.
//
// It returns nil if doc is valid, an *Error listing the violations if it is
// not, and an ordinary error for an unknown kind or a doc holding values
// that are not JSON values.
func Validate(kind Kind, doc any) error {
	if _, ok := fileOf[kind]; !ok {
		return unknownKind(kind)
	}
	err := compiled[kind]().Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return check.NewError(kind, doc, collect(ve, doc, nil))
	}
	return fmt.Errorf("schema: validate %s: %w", kind, err)
}

// ValidateJSON decodes data (numbers as json.Number, so integers keep their
// precision) and validates it like Validate. Data that is not exactly one
// JSON value, trailing data included, is an ordinary error, not an *Error.
func ValidateJSON(kind Kind, data []byte) error {
	if _, ok := fileOf[kind]; !ok {
		return unknownKind(kind)
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

// Source returns the raw JSON text of the schema of kind, or nil for an
// unknown kind. The caller may modify the returned slice.
func Source(kind Kind) []byte {
	name, ok := fileOf[kind]
	if !ok {
		return nil
	}
	raw, err := files.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("schema: embedded %s missing: %v", name, err))
	}
	return raw
}
