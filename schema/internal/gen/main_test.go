package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedUpToDate: regenerating the validators from the schema
// files yields the committed schema/check/devices_gen.go byte for byte
// (run go generate ./schema/check after changing a schema).
func TestGeneratedUpToDate(t *testing.T) {
	files := []string{"../../device-role-tagging-1.0.json", "../../device-role-tagging-1.1.json", "../../device-role-tagging-1.2.json"}
	got, err := generate(files)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../check/devices_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("schema/check/devices_gen.go is not what the schema files generate: run go generate ./schema/check")
	}
}

// TestRefusesUnknownKeywords: a keyword the interpreter does not
// implement fails generation instead of being ignored.
func TestRefusesUnknownKeywords(t *testing.T) {
	for _, s := range []string{
		`{"type":"object","oneOf":[{"type":"object"}]}`,
		`{"type":"string","format":"uuid"}`,
		`{"properties":{"a":{"maxLength":3}}}`,
		`{"$ref":"other.json#/x"}`,
		`{"const":{"a":1}}`,
	} {
		p := filepath.Join(t.TempDir(), "x-1.0.json")
		doc := `{"$schema":"https://json-schema.org/draft/2020-12/schema",` + strings.TrimPrefix(s, "{")
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := generate([]string{p}); err == nil {
			t.Errorf("%s: generated, want an error", s)
		} else {
			t.Logf("%s: %v", s, err)
		}
	}
}
