package serve

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/internal/testenv"

	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
)

// TestServeAdminTCP runs `hostctl serve` with the TCP admin listener: a
// member token sees only its project, a request without a token is 401,
// and the tokens file holds no usable secret.
func TestServeAdminTCP(t *testing.T) {
	dir := t.TempDir()
	adminTok, adminEntry, err := auth.NewToken("ops", types.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	memberTok, memberEntry, err := auth.NewToken("alice", types.RoleMember, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal([]auth.TokenEntry{adminEntry, memberEntry})
	tokens := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokens, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{adminTok, memberTok} {
		if strings.Contains(string(b), tok) {
			t.Fatal("the tokens file holds a token")
		}
	}

	var stdout, stderr testenv.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", filepath.Join(dir, "data"), "--socket", filepath.Join(dir, "s.sock"),
			"--metadata-listen", "127.0.0.1:0", "--virt", "none", "--admin-listen", "127.0.0.1:0", "--admin-tokens-file", tokens,
		}, cli.Env{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader("")})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, stderr.String())
		}
	})
	re := regexp.MustCompile(` admin_tcp=(\S+)`)
	var addr string
	for deadline := time.Now().Add(20 * time.Second); addr == ""; {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", stderr.String())
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	base := "http://" + addr
	admin, member := client.NewTCP(base, adminTok), client.NewTCP(base, memberTok)
	if _, err := admin.Apply(ctx, []byte("name: b-1\nproject_id: b\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := member.Apply(ctx, []byte("name: a-1\n")); err != nil {
		t.Fatal(err)
	}
	list, err := member.List(ctx)
	if err != nil || len(list) != 1 || list[0].Spec.Name != "a-1" || list[0].Spec.ProjectID != "a" {
		t.Fatalf("member list = %+v, %v", list, err)
	}
	if _, err := member.Get(ctx, "b-1"); status(err) != 404 {
		t.Errorf("member reads b-1: %v", err)
	}
	if _, err := client.NewTCP(base, "").List(ctx); status(err) != 401 {
		t.Errorf("no token: %v", err)
	}
	for _, tok := range []string{adminTok, memberTok} {
		if strings.Contains(stderr.String()+stdout.String(), tok) {
			t.Error("a token appears in the daemon's output")
		}
	}
}

func status(err error) int {
	var ae *types.Error
	if errors.As(err, &ae) {
		return ae.StatusCode()
	}
	return 0
}

func TestServeAdminFlagErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--admin-listen", "127.0.0.1:0"},
		{"--admin-tokens-file", filepath.Join(dir, "t.json")},
		{"--admin-listen", "127.0.0.1:0", "--admin-tokens-file", filepath.Join(dir, "missing.json")},
		{"--admin-listen", "127.0.0.1:0", "--admin-tokens-file", filepath.Join(dir, "t.json"), "--admin-tls-cert", "c.pem"},
	} {
		var stderr testenv.SyncBuffer
		full := append([]string{"serve", "--data-dir", dir, "--socket", filepath.Join(dir, "s.sock"), "--metadata-listen", "127.0.0.1:0", "--virt", "none"}, args...)
		if code := run(t.Context(), full, cli.Env{Stdout: io.Discard, Stderr: &stderr}); code == 0 {
			t.Errorf("%v: exit 0", args)
		}
		if !strings.Contains(stderr.String(), "admin") {
			t.Errorf("%v: error does not name the flag: %s", args, stderr.String())
		}
	}
}
