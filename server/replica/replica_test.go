package replica

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

const (
	uuid       = "3f0b5b9e-9c1e-4b8a-9d3e-2f6f2a7c1d01"
	userSecret = "user-data-s3cret-marker"
)

// storeFile writes a bolt store holding one instance reachable from
// 127.0.0.1 and closes it (bolt allows one process per file).
func storeFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vmeta.db")
	st, err := bolt.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in := &model.Instance{Name: "web-1", UUID: uuid, Hostname: "web-1", ProjectID: "demo", Addresses: []string{"127.0.0.1"}, UserData: "#cloud-config\n# " + userSecret + "\n"}
	in.Normalize()
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	tr, err := metadata.Render(in, metadata.Options{})
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := tr.Encode()
	if _, _, err := st.Put(t.Context(), store.Instance{Name: in.Name, UUID: uuid, ProjectID: "demo", Addresses: in.Addresses, Spec: []byte(`{}`)},
		store.Document{InstanceUUID: uuid, ProjectID: "demo", Addresses: in.Addresses, Tree: enc}, -1); err != nil {
		t.Fatal(err)
	}
	return p
}

var addrRE = regexp.MustCompile(`listen=(\S+)`)
var metricsRE = regexp.MustCompile(`metrics=(\S+)`)

func TestRun(t *testing.T) {
	db := storeFile(t)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "proxy.secret")
	os.WriteFile(secretFile, []byte("  proxy-s3cret-value\n"), 0o600)
	keyFile := filepath.Join(dir, "keys", "token.key")

	var logs testenv.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{
			"--store", "bolt://" + db, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
			"--trusted-proxies", "192.0.2.0/24", "--proxy-secret-file", secretFile,
			"--token-key-file", keyFile, "--token-policy", "optional", "--access-log=true", "--log-level", "debug",
		}, Env{Stdout: io.Discard, Stderr: &logs})
	}()
	var listen, metrics string
	deadline := time.Now().Add(10 * time.Second)
	for listen == "" {
		if m := addrRE.FindStringSubmatch(logs.String()); m != nil {
			listen = m[1]
			metrics = metricsRE.FindStringSubmatch(logs.String())[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no start-up line:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	get := func(url string, h http.Header) (int, string) {
		t.Helper()
		r, _ := http.NewRequest("GET", url, nil)
		for k, v := range h {
			r.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://"+listen+"/latest/meta-data/hostname", nil); code != 200 || body != "web-1.novalocal" {
		t.Errorf("hostname: %d %q", code, body)
	}
	if code, body := get("http://"+listen+"/openstack/latest/user_data", nil); code != 200 || !strings.Contains(body, userSecret) {
		t.Errorf("user_data: %d", code)
	}
	// A token from the replica, signed with the key file it created.
	r, _ := http.NewRequest("PUT", "http://"+listen+"/latest/api/token", nil)
	r.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	tokb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tok := string(tokb)
	if code, _ := get("http://"+listen+"/latest/meta-data/hostname", http.Header{"X-Aws-Ec2-Metadata-Token": {tok}}); code != 200 {
		t.Errorf("with token: %d", code)
	}
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token key file: %v %v", fi, err)
	}
	key, _ := os.ReadFile(keyFile)
	if code, body := get("http://"+metrics+"/metrics", nil); code != 200 || !strings.Contains(body, `vmeta_metadata_requests_total{code="200",path_class="ec2"} 2`) {
		t.Errorf("metrics: %d\n%s", code, body)
	}
	if code, body := get("http://"+metrics+"/healthz", nil); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Errorf("healthz: %d %s", code, body)
	}
	// The guest port has no /healthz: the store's state is the
	// operator's (a guest at 127.0.0.1 gets an unknown path's 404).
	if code, body := get("http://"+listen+"/healthz", nil); code != 404 || strings.Contains(body, "store") || strings.Contains(body, "ok") {
		t.Errorf("healthz on the guest port: %d %q, want 404 without the store's state", code, body)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d", code)
	}
	out := logs.String()
	for _, secret := range []string{"proxy-s3cret-value", strings.TrimSpace(string(key)), tok, userSecret} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds a secret (%.10s…):\n%s", secret, out)
		}
	}
	for _, want := range []string{"metadata proxy secret loaded", "metadata token key created", `msg="metadata request"`, "shutting down"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestRunErrors(t *testing.T) {
	db := storeFile(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no store", []string{}, 2, "--store is required"},
		{"argument", []string{"--store", "bolt://" + db, "extra"}, 2, "no arguments"},
		{"bad flag", []string{"--nope"}, 2, "flag provided but not defined"},
		{"bad policy", []string{"--store", "bolt://" + db, "--token-policy", "sometimes"}, 1, "optional or required"},
		{"bad proxies", []string{"--store", "bolt://" + db, "--trusted-proxies", "10.0.0.0/99"}, 1, "trusted proxies"},
		{"missing secret file", []string{"--store", "bolt://" + db, "--proxy-secret-file", "/nonexistent/secret"}, 1, "proxy secret"},
		{"bad store", []string{"--store", "mysql://x"}, 1, "open store"},
		{"bad listen", []string{"--store", "bolt://" + db, "--listen", "256.0.0.1:1"}, 1, "listen"},
		{"help", []string{"-h"}, 0, "Usage:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out testenv.SyncBuffer
			code := Run(t.Context(), tc.args, Env{Stdout: io.Discard, Stderr: &out})
			if code != tc.code || !strings.Contains(out.String(), tc.msg) {
				t.Errorf("exit %d, want %d; output:\n%s", code, tc.code, out.String())
			}
		})
	}
}
