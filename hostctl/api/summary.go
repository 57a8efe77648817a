package api

import (
	"strings"

	"github.com/vmeta/vmeta/internal/model"
)

// summary is an error's message without the list of the fields it
// refuses, which its message ends with ("create flavor f1: invalid
// flavor: vcpus: 5000: must be 1 to 1024" is "create flavor f1: invalid
// flavor"): what was refused, for the body's summary. A message that does
// not end with the list is summed up by what the fields belong to.
func summary(msg string, se *model.SpecError) string {
	if s, ok := strings.CutSuffix(msg, ": "+model.JoinFieldErrors(se.Errors)); ok && s != "" {
		return s
	}
	return "invalid " + se.Subject()
}
