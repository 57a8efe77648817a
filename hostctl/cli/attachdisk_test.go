package cli_test

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestAttachDiskEncryptedFlag: --encrypted=false reaches the daemon as an
// explicit false (refused under an encrypting flavor), --encrypted as
// true, and no flag as no field (the flavor and image decide).
func TestAttachDiskEncryptedFlag(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var bodies []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error": "recorded"}`)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	for _, tc := range []struct {
		flags []string
		want  string // in the body; "" for no encrypted field at all
	}{
		{[]string{"--encrypted=false"}, `"encrypted":false`},
		{[]string{"--encrypted"}, `"encrypted":true`},
		{[]string{"--encrypted=true"}, `"encrypted":true`},
		{nil, ""},
	} {
		mu.Lock()
		bodies = nil
		mu.Unlock()
		args := append([]string{"--socket", sock, "instance", "attach-disk", "a-1", "--tag", "data"}, tc.flags...)
		code, _, errOut := hostctl(t, args...)
		mu.Lock()
		got := strings.Join(bodies, "\n")
		mu.Unlock()
		if code != 1 || !strings.Contains(errOut, "recorded") {
			t.Errorf("%v: exit %d: %s", tc.flags, code, errOut)
		}
		switch {
		case tc.want == "" && strings.Contains(got, `"encrypted"`):
			t.Errorf("%v: body %s names encrypted; want it left to the flavor", tc.flags, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%v: body %s, want %s", tc.flags, got, tc.want)
		}
	}
	if code, _, errOut := hostctl(t, "--socket", sock, "instance", "attach-disk", "a-1", "--encrypted=maybe"); code != 2 || !strings.Contains(errOut, "--encrypted=maybe") {
		t.Errorf("--encrypted=maybe: exit %d: %s", code, errOut)
	}
}
