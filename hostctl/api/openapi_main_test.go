package api

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

// oaTests validates every request the package's tests send to a handler
// of NewHandler (or Handler), and every answer, against openapi.yaml:
// TestMain sets handlerHook before the tests run and fails the run when
// it found anything, listing each violation with its request.
var oaTests *oaValidator

func TestMain(m *testing.M) {
	v, err := newOAValidator(OpenAPIYAML)
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapi.yaml:", err)
		os.Exit(1)
	}
	oaTests, handlerHook = v, v.wrap
	code := m.Run()
	if !v.Wait(10 * time.Second) {
		fmt.Fprintln(os.Stderr, "openapi: requests still being served 10s after the tests: their exchanges are not checked")
	}
	if vs := v.Violations(); len(vs) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d exchanges of the API tests do not match openapi.yaml:\n", len(vs))
		for _, s := range vs {
			fmt.Fprintln(os.Stderr, "  "+s)
		}
		code = 1
	}
	if testing.Verbose() {
		v.mu.Lock()
		var unseen []string
		ops := 0
		for _, item := range v.doc.Paths.Map() {
			for _, op := range item.Operations() {
				ops++
				if v.seen[op.OperationID] == 0 {
					unseen = append(unseen, op.OperationID)
				}
			}
		}
		slices.Sort(unseen)
		fmt.Printf("openapi: %d requests validated; %d of %d operations exercised; not exercised: %v\n", v.requests, ops-len(unseen), ops, unseen)
		v.mu.Unlock()
	}
	os.Exit(code)
}
