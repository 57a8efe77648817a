package e2e

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// oapiCodegen is the generator TestOpenAPIGeneratedClient runs, at a
// pinned version, through the module proxy (as make lint runs its
// linters): oapi-codegen, the generator Go operators use, which reads
// OpenAPI 3.1.
const oapiCodegen = "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"

// oapiRuntime is the runtime package the generated client imports.
const oapiRuntime = "github.com/oapi-codegen/runtime v1.9.0"

// TestOpenAPIGeneratedClient: a client generated from the OpenAPI
// document a running `hostctl serve` serves (GET /v1/openapi.json)
// compiles, and applies, shows and lists an instance through the admin
// socket, and reads a 404 as the documented error body; the instance is
// then there for hostctl's own client too.
func TestOpenAPIGeneratedClient(t *testing.T) {
	d := startDaemon(t, daemonOptions{Args: []string{"--virt", "none"}})
	doc := getUnix(t, d.Socket, "/v1/openapi.json")

	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "openapi-client", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"openapi.json": string(doc),
		"main.go":      string(src),
		"go.mod":       "module gentest\n\ngo 1.24\n\nrequire " + oapiRuntime + "\n",
		"oapi-codegen.yaml": "package: hostctlapi\ngenerate:\n  client: true\n  models: true\n" +
			"output: hostctlapi/client.gen.go\noutput-options:\n  skip-prune: true\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "hostctlapi"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The go commands get the test's environment (proxies included: the
	// generator and the runtime come through the module proxy), outside
	// this module.
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	goCmd := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, testenv.GoTool(), args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err == nil {
			return
		}
		if unreachable(string(out)) {
			testenv.Require(t, "the module proxy", "go "+strings.Join(args, " ")+": "+string(out))
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	goCmd("run", oapiCodegen, "-config", "oapi-codegen.yaml", "openapi.json")
	goCmd("mod", "tidy")
	goCmd("build", "-o", "gentest", ".")

	const name = "gen-1"
	r := runCmd(t, testenv.ChildEnv(nil), filepath.Join(dir, "gentest"), d.Socket, name)
	if r.code != 0 {
		t.Fatalf("the generated client: %s", r)
	}
	want := "applied gen-1 revision 1; got gen-1 addresses [10.77.0.1]; listed 1; absent: 404"
	if !strings.HasPrefix(r.stdout, want) {
		t.Errorf("the generated client printed %q, want it to start %q", r.stdout, want)
	}
	if show := d.MustCtl("instance", "show", name); !strings.Contains(show.stdout, "10.77.0.1") {
		t.Errorf("hostctl instance show %s after the generated client applied it:\n%s", name, show.stdout)
	}
}

// unreachable reports whether go's output says that the module proxy
// (or the network) could not be reached.
func unreachable(out string) bool {
	for _, s := range []string{"dial tcp", "no such host", "GOPROXY=off", "module lookup disabled", "connection refused", "i/o timeout", "TLS handshake"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// getUnix GETs path from the admin API on socket and expects 200.
func getUnix(t *testing.T, socket, path string) []byte {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	resp, err := c.Get("http://hostctl" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b.String())
	}
	return b.Bytes()
}
