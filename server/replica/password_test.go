package replica

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestStorePasswordOffCommandLine: the store's password comes from
// --store-password-file or the environment, so the command line (ps)
// never carries it; a password in the URL still works but is warned
// about; no log line holds the password.
func TestStorePasswordOffCommandLine(t *testing.T) {
	const pw = "s3cret-store-pass"
	srv := testenv.StartRedisServer(t, "--requirepass", pw)
	pwFile := filepath.Join(t.TempDir(), "store-password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--listen", "127.0.0.1:0"}
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantLog  string
	}{
		{"password file", []string{"--store", srv.URL(), "--store-password-file", pwFile}, nil, 0, "vmeta-metadata serving"},
		{"environment", []string{"--store", srv.URL()}, map[string]string{storeurl.PasswordEnv: pw}, 0, "vmeta-metadata serving"},
		{"in the URL: warned", []string{"--store", "redis://:" + pw + "@" + srv.Addr() + "/0"}, nil, 0, "which every user of this machine can read on the command line"},
		{"none", []string{"--store", srv.URL()}, nil, 1, "NOAUTH"},
		{"empty file", []string{"--store", srv.URL(), "--store-password-file", os.DevNull}, nil, 2, "--store-password-file /dev/null: empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testenv.SyncBuffer
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan int, 1)
			go func() {
				done <- Run(ctx, append(tc.args, base...), Env{Stdout: io.Discard, Stderr: &logs, Getenv: func(k string) string { return tc.env[k] }})
			}()
			var code int
			deadline := time.After(20 * time.Second)
		wait:
			for {
				select {
				case code = <-done:
					break wait
				case <-deadline:
					t.Fatalf("neither served nor failed:\n%s", logs.String())
				case <-time.After(10 * time.Millisecond):
					if strings.Contains(logs.String(), "vmeta-metadata serving") {
						cancel()
						code = <-done
						break wait
					}
				}
			}
			out := logs.String()
			if code != tc.wantCode || !strings.Contains(out, tc.wantLog) {
				t.Errorf("exit %d, want %d with %q; log:\n%s", code, tc.wantCode, tc.wantLog, out)
			}
			if strings.Contains(out, pw) {
				t.Errorf("the log holds the password:\n%s", out)
			}
			for _, a := range tc.args {
				if tc.name != "in the URL: warned" && strings.Contains(a, pw) {
					t.Errorf("argument %q holds the password", a)
				}
			}
		})
	}
}
