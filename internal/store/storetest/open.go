package storetest

import (
	"io"
	"strings"
	"testing"
)

// OpenRefused checks what an Open that must fail returned: an error that
// mentions every want and never secret (a password in the URL). A store
// that opened all the same is closed and the test stops; shown is the
// URL as the error may print it (redacted).
func OpenRefused(t testing.TB, st io.Closer, err error, shown, secret string, want []string) {
	t.Helper()
	if err == nil {
		st.Close()
		t.Fatalf("Open(%s) succeeded", shown)
	}
	msg := err.Error()
	t.Logf("error: %s", msg)
	if strings.Contains(msg, secret) {
		t.Fatalf("error contains the password: %s", msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not mention %q", msg, w)
		}
	}
}
