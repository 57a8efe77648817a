package model

import "strings"

// Subject is what the fields of e belong to: Of, or "instance spec".
func (e *SpecError) Subject() string {
	if e.Of == "" {
		return "instance spec"
	}
	return e.Of
}

// JoinFieldErrors is a list of field errors as an error message ends
// with it: each error's text, joined by "; ". An error that wraps a
// *SpecError and ends with its list can be told apart from the list
// (the API's summary of a refusal, the CLI's heading).
func JoinFieldErrors(errs []FieldError) string {
	parts := make([]string, len(errs))
	for i, fe := range errs {
		parts[i] = fe.Error()
	}
	return strings.Join(parts, "; ")
}
