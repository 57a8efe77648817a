package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/testenv"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// failingMount is the share service's command runner with mount(8)
// failing like mount.nfs does when the filer refuses (the output names
// the export, which the service redacts); while fail is false mount
// "succeeds" and is recorded in mountinfo.
type failingMount struct {
	fail      atomic.Bool
	mountinfo string
}

func (r *failingMount) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	if name == "mount" && r.fail.Load() {
		return []byte("mount.nfs: access denied by server while mounting " + args[len(args)-2]), errors.New("exit status 32")
	}
	b, _ := os.ReadFile(r.mountinfo)
	switch name {
	case "mount":
		b = append(b, fmt.Sprintf("99 1 0:99 / %s rw - nfs4 %s rw\n", args[len(args)-1], args[len(args)-2])...)
	case "umount":
		var keep []string
		for _, l := range strings.SplitAfter(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[4] == args[0] {
				continue
			}
			keep = append(keep, l)
		}
		b = []byte(strings.Join(keep, ""))
	}
	return nil, os.WriteFile(r.mountinfo, b, 0o600)
}

// TestInstanceErrorAPI drives an instance in ERROR through the admin API
// and the hostctl CLI, with a real domain in libvirtd and the real share
// service (its mount command failing, as mount.nfs does): the failed
// start answers with the mount failure; GET /v1/instances/{name} and
// `hostctl instance show|list` show state error and a fault naming the
// share, never its export location; POST .../start is 409 asking for a
// hard reboot (the CLI exits 1 with that message); a reboot with a bad
// type is 400 naming the field; `hostctl instance reboot --hard` with
// the mount fixed starts the domain and clears ERROR.
func TestInstanceErrorAPI(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	qemuImg := testenv.LookPath(t, "qemu-img")
	ctx := context.Background()
	conn, err := virt.Connect(ctx, uri, virt.ConnOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	dir := t.TempDir()
	st := stores.BoltIn(t, dir)
	var logs lockedBuf
	log := slog.New(slog.NewTextHandler(&logs, nil))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	})
	run := &failingMount{mountinfo: filepath.Join(dir, "mountinfo")}
	if err := os.WriteFile(run.mountinfo, []byte("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run.fail.Store(true)
	// The share service is a part of the controller: made first, given
	// the controller once it is built.
	core := &lateCore{}
	svc := shares.New(st, core, shares.Options{ShareRoot: filepath.Join(dir, "shares"), Logger: log, Runner: run,
		MountInfo: run.mountinfo, ReconcileInterval: -1})
	ctl := newControllerIn(t, dir, st, controller.Options{Logger: log, Hypervisor: conn, QemuImg: qemuImg,
		Domain: virt.Options{MemoryMiB: 128}, ShareRoot: filepath.Join(dir, "shares"), Parts: []part.Part{svc, faults.New(st, log)}},
		disks.Options{})
	core.Controller = ctl
	t.Cleanup(func() { svc.Close() })
	tok, entry, err := auth.NewToken("root", types.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	ta, err := auth.NewTokenAuth([]auth.TokenEntry{entry})
	if err != nil {
		t.Fatal(err)
	}
	svcs := ctlServices(ctl)
	svcs.Shares = svc
	srv := httptest.NewServer(api.NewHandler(svcs, log, ta))
	t.Cleanup(srv.Close)
	c := client.NewTCP(srv.URL, tok)
	t.Setenv(cli.TokenEnv, tok)
	hostctl := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cli.Run(ctx, append([]string{"--api", srv.URL}, args...), cli.Env{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader("")})
		return code, out.String(), errOut.String()
	}

	name := "shares2-" + strings.TrimPrefix(testenv.UniqueDomainName(t), "vmeta-test-")
	testenv.CleanupDomain(t, uri, name)
	if _, err := c.Apply(ctx, []byte("name: "+name+"\nproject_id: demo\n")); err != nil {
		t.Fatal(err)
	}
	const export = "filer.example:/vol/secret-export"
	sh, err := c.CreateShare(ctx, types.ShareCreateRequest{ProjectID: "demo", Proto: types.ShareProtoNFS, ExportLocation: export})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AttachShare(ctx, name, types.ServerShareAttach{ShareID: sh.ID}); err != nil {
		t.Fatal(err)
	}

	_, err = c.Start(ctx, name)
	if err == nil || !strings.Contains(err.Error(), "could not be mounted") || strings.Contains(err.Error(), export) {
		t.Fatalf("start with a failing mount: %v", err)
	}
	inst, err := c.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != "error" || !strings.Contains(inst.Fault, sh.ID) || strings.Contains(inst.Fault, export) {
		t.Errorf("GET: state %q fault %q; want error naming the share, without the export", inst.State, inst.Fault)
	}
	code, out, errOut := hostctl("instance", "show", name)
	if code != 0 || !strings.Contains(out, "error") || !strings.Contains(out, sh.ID) || !strings.Contains(out, "reboot --hard") || strings.Contains(out, "secret-export") {
		t.Errorf("instance show: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"--output", "json", "instance", "show", name}, {"instance", "list"}, {"--output", "json", "instance", "list"}} {
		code, out, errOut := hostctl(args...)
		if code != 0 || !strings.Contains(out, "error") || strings.Contains(out, "secret-export") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}

	_, err = c.Start(ctx, name)
	var ae *types.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || !strings.Contains(ae.Message, "hard reboot") {
		t.Errorf("start in ERROR: %v; want 409 asking for a hard reboot", err)
	}
	if code, _, errOut := hostctl("instance", "start", name); code != 1 || !strings.Contains(errOut, "reboot --hard "+name) {
		t.Errorf("hostctl instance start in ERROR: exit %d: %s", code, errOut)
	}
	if code, _, errOut := hostctl("instance", "reboot", name); code != 1 || !strings.Contains(errOut, "hard reboot") {
		t.Errorf("hostctl instance reboot (soft) in ERROR: exit %d: %s", code, errOut)
	}
	got, body := do(t, http.MethodPost, srv.URL+"/v1/instances/"+name+"/reboot", tok, `{"type":"WARM"}`)
	if got != http.StatusBadRequest || !strings.Contains(body, `"field":"type"`) || !strings.Contains(body, "HARD or SOFT") {
		t.Errorf("reboot type WARM: %d %s", got, body)
	}

	run.fail.Store(false)
	code, out, errOut = hostctl("instance", "reboot", "--hard", name)
	if code != 0 || !strings.Contains(out, "rebooted") {
		t.Fatalf("hostctl instance reboot --hard: exit %d\n%s%s", code, out, errOut)
	}
	inst, err = c.Get(ctx, name)
	if err != nil || inst.State != "running" || inst.Fault != "" {
		t.Fatalf("after the hard reboot: %+v, %v", inst, err)
	}
	if m, err := c.ServerShare(ctx, name, sh.ID); err != nil || m.Status != types.ShareActive {
		t.Errorf("mapping after the hard reboot: %+v, %v", m, err)
	}
	if code, out, errOut := hostctl("instance", "reboot", name); code != 0 || !strings.Contains(out, "rebooted") {
		t.Errorf("hostctl instance reboot (soft) of a running instance: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := c.Stop(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// lateCore is the controller as a share service made before it sees it.
type lateCore struct{ *controller.Controller }
