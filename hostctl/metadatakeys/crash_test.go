package metadatakeys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/testenv"
	"github.com/vmeta/vmeta/server"
)

// crashScenario is one procedure of the matrix: how to prepare the key
// files, the child's arguments, and what must hold after.
type crashScenario struct {
	proc string
	// prepare runs (in this process) on fresh files before the crash.
	prepare func(t *testing.T, tokenFile, proxyFile string)
	args    []string
	// wantGen is the current generation of the procedure's file after
	// recovery; file is "token" or "proxy".
	file    string
	wantGen int64
	// proxySecret picks, from the proxy file before the procedure, the
	// secret the proxies sign with (valid throughout).
	proxySecret func(before []server.KeyEntry) []byte
}

func currentSecret(before []server.KeyEntry) []byte { return before[0].Key }

var crashScenarios = []crashScenario{
	{proc: ProcTokenRotate, args: []string{"-gen", "2"}, file: "token", wantGen: 2, proxySecret: currentSecret},
	{proc: ProcProxyRotate, args: []string{"-gen", "1", "-keep", "1"}, file: "proxy", wantGen: 1, proxySecret: currentSecret},
	{
		// The operator has updated the proxies to the current secret and
		// prunes the prior one.
		proc: ProcProxyPrune, args: []string{"-keep", "0"}, file: "proxy", wantGen: 1, proxySecret: currentSecret,
		prepare: func(t *testing.T, _, proxyFile string) {
			if _, err := NewProxy(Options{Path: proxyFile, Delay: time.Nanosecond}).Rotate(t.Context(), keyrotation.Subject{}, 1, 2, nil); err != nil {
				t.Fatal(err)
			}
		},
	},
	{
		// Seven hours on, the prior token key's tokens have expired.
		proc: ProcTokenExpire, args: []string{"-later", "7h"}, file: "token", wantGen: 2, proxySecret: currentSecret,
		prepare: func(t *testing.T, tokenFile, _ string) {
			if _, err := NewToken(Options{Path: tokenFile, Delay: time.Nanosecond}).Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil); err != nil {
				t.Fatal(err)
			}
		},
	},
}

// TestCrashMatrix kills the procedures by SIGKILL at every step they
// declare (a child built with -tags vmetacrash), on the embedded store
// and on Redis, then runs them again. Nothing may be lost: after the
// crash and after the recovery, the metadata service loaded from the
// files accepts a token minted before the procedure, mints and accepts a
// new one, and accepts the proxies' signature; after recovery the file
// is at the procedure's generation with nothing pending, whole and 0600.
func TestCrashMatrix(t *testing.T) {
	bin := testenv.BuildCrashBinary(t, "./testdata/keyrotate")
	type row struct{ proc, step, store, outcome string }
	var rows []row
	for _, backend := range []string{"bolt", "redis"} {
		for _, sc := range crashScenarios {
			steps := crashpoint.Steps(sc.proc)
			if len(steps) == 0 {
				t.Fatalf("%s declares no steps", sc.proc)
			}
			for _, step := range steps {
				rw := row{sc.proc, step, backend, "LOST"}
				t.Run(backend+"/"+sc.proc+"/"+step, func(t *testing.T) {
					if lost := crashOnce(t, bin, backend, sc, step); len(lost) > 0 {
						t.Errorf("lost after a crash at %s/%s: %s", sc.proc, step, strings.Join(lost, "; "))
						return
					}
					rw.outcome = "recovered"
				})
				rows = append(rows, rw)
			}
		}
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCEDURE\tSTEP\tSTORE\tOUTCOME")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.proc, r.step, r.store, r.outcome)
	}
	tw.Flush()
	t.Logf("metadata key crash matrix:\n%s", b.String())
}

func crashOnce(t *testing.T, bin, backend string, sc crashScenario, step string) (lost []string) {
	dir := t.TempDir()
	tokenFile, proxyFile := filepath.Join(dir, "token.key"), filepath.Join(dir, "proxy.secret")
	if _, _, err := server.ReadOrCreateKeyFile(tokenFile); err != nil {
		t.Fatal(err)
	}
	writeKeyFile(t, proxyFile, server.KeyEntry{Key: []byte("crash-proxy-secret-0"), State: server.KeyCurrent})
	if sc.prepare != nil {
		sc.prepare(t, tokenFile, proxyFile)
	}
	storeURL := "bolt://" + filepath.Join(dir, "vmeta.db")
	if backend == "redis" {
		storeURL = testenv.StartRedis(t)
	}
	withStore(t, storeURL, func(st store.Store) { seed(t, st) })
	before, err := os.ReadFile(proxyFile)
	if err != nil {
		t.Fatal(err)
	}
	beforeEntries, err := server.ParseKeyFile(before)
	if err != nil {
		t.Fatal(err)
	}
	secret := sc.proxySecret(beforeEntries)
	var oldToken string
	withStore(t, storeURL, func(st store.Store) {
		oldToken = mintToken(t, metadataService(t, st, tokenFile, proxyFile))
	})

	file := tokenFile
	if sc.file == "proxy" {
		file = proxyFile
	}
	args := append([]string{"-proc", sc.proc, "-file", file, "-store", storeURL}, sc.args...)
	out, err := runChild(bin, args, crashpoint.Name(sc.proc, step))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.String() != "signal: killed" {
		t.Fatalf("the child was not killed at %s: %v\n%s", step, err, out)
	}
	check := func(when string) {
		withStore(t, storeURL, func(st store.Store) {
			s := metadataService(t, st, tokenFile, proxyFile)
			if c := guestGet(s, oldToken); c != 200 {
				lost = append(lost, fmt.Sprintf("%s: a token minted before the procedure: %d", when, c))
			}
			if c := guestGet(s, mintToken(t, s)); c != 200 {
				lost = append(lost, fmt.Sprintf("%s: a new token: %d", when, c))
			}
			if c := proxyGet(s, secret); c != 200 {
				lost = append(lost, fmt.Sprintf("%s: the proxies' secret: %d", when, c))
			}
		})
	}
	check("after the crash")
	// A key distributed before the crash is the one that becomes current
	// (the procedure is idempotent for its generation).
	var distributed []byte
	if data, err := os.ReadFile(file); err == nil {
		if es, err := server.ParseKeyFile(data); err == nil {
			for _, e := range es {
				if e.State == server.KeyNext && e.Generation == sc.wantGen {
					distributed = e.Key
				}
			}
		}
	}
	if out, err := runChild(bin, args, ""); err != nil {
		t.Fatalf("recovery run: %v\n%s", err, out)
	}
	check("after recovery")
	data, err := os.ReadFile(file)
	if err != nil {
		return append(lost, err.Error())
	}
	es, err := server.ParseKeyFile(data)
	switch {
	case err != nil:
		lost = append(lost, fmt.Sprintf("%s file after recovery: %v", sc.file, err))
	case es[0].Generation != sc.wantGen || stateOf(es).Next != 0:
		lost = append(lost, fmt.Sprintf("%s file after recovery: %+v, want generation %d with nothing pending", sc.file, stateOf(es), sc.wantGen))
	case distributed != nil && string(es[0].Key) != string(distributed):
		lost = append(lost, "the key distributed before the crash was replaced by another")
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		lost = append(lost, fmt.Sprintf("%s file mode: %v %v", sc.file, fi, err))
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*")); len(m) > 0 {
		lost = append(lost, fmt.Sprintf("temporary files left: %v", m))
	}
	return lost
}

// withStore opens the store for f and closes it (a bolt file allows one
// process at a time: the child needs it after).
func withStore(t *testing.T, url string, f func(store.Store)) {
	t.Helper()
	st, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f(st)
}

func runChild(bin string, args []string, crashAt string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = testenv.ChildEnv([]string{crashpoint.EnvVar})
	if crashAt != "" {
		cmd.Env = append(cmd.Env, crashpoint.EnvVar+"="+crashAt)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// metadataService is the metadata service as hostctl serve and
// vmeta-metadata build it from their flags.
func metadataService(t *testing.T, st store.Store, tokenFile, proxyFile string) *server.Server {
	t.Helper()
	cfg := server.Config{TokenKeyFile: tokenFile, ProxySecretFile: proxyFile, TrustedProxies: "192.0.2.0/24", TokenPolicy: "optional"}
	o, err := cfg.Options(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("the metadata service cannot start on the key files: %v", err)
	}
	return server.New(st, o)
}

func serve(s *server.Server, method, remote string, h http.Header) (int, string) {
	r := httptest.NewRequest(method, "http://169.254.169.254/latest/meta-data/hostname", nil)
	if method == "PUT" {
		r = httptest.NewRequest(method, "http://169.254.169.254/latest/api/token", nil)
	}
	r.RemoteAddr = remote
	for k, v := range h {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func mintToken(t *testing.T, s *server.Server) string {
	t.Helper()
	code, body := serve(s, "PUT", guestAddr+":40000", http.Header{"X-Aws-Ec2-Metadata-Token-Ttl-Seconds": {"21600"}})
	if code != 200 {
		t.Fatalf("token PUT: %d %s", code, body)
	}
	return body
}

func guestGet(s *server.Server, tok string) int {
	code, _ := serve(s, "GET", guestAddr+":40000", http.Header{"X-Aws-Ec2-Metadata-Token": {tok}})
	return code
}

func proxyGet(s *server.Server, secret []byte) int {
	code, _ := serve(s, "GET", "192.0.2.1:40000", proxyHeaders(secret))
	return code
}
