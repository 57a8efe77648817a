package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// stateCtl reports a chosen domain state for the instances named in it
// (the share service asks for SHUTOFF); the rest is the real controller.
type stateCtl struct {
	*controller.Controller
	mu          sync.Mutex
	state       map[string]string
	unsupported bool
}

// shareSupport plays a host whose libvirt cannot share guest memory when
// unsupported is set (the share service's Options.Support).
func (s *stateCtl) shareSupport(context.Context) (virt.ShareSupport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return virt.ShareSupport{Virtiofs: true, SharedMemory: !s.unsupported}, nil
}

func (s *stateCtl) Get(ctx context.Context, name string) (*controller.Instance, error) {
	inst, err := s.Controller.Get(ctx, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.state[name]; ok && err == nil {
		inst.State = st
	} else if err == nil && inst.State == "" {
		inst.State = "shutoff" // no hypervisor here: play a shut-off domain, where shares are attached
	}
	return inst, err
}

// DomainState is Get's state: the share service sees the states set here.
func (s *stateCtl) DomainState(ctx context.Context, name string) (string, error) {
	inst, err := s.Get(ctx, name)
	if err != nil {
		return "", err
	}
	return inst.State, nil
}

type sharesAPI struct {
	st             store.Store
	ctl            *stateCtl
	root           string
	admin, a, b    *client.Client
	base, adminTok string
	logs           *bytes.Buffer
}

type lockedBuf struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *lockedBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

// newSharesAPI serves the admin API with the share service over a real
// store and controller (no hypervisor), with token auth: an admin and
// members of projects a and b.
func newSharesAPI(t *testing.T) *sharesAPI {
	t.Helper()
	dir := t.TempDir()
	st := stores.BoltIn(t, dir)
	logs := &lockedBuf{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	// The share service is a part of the controller: made first, it sees
	// the controller through ctl.
	ctl := &stateCtl{state: map[string]string{}}
	root := filepath.Join(dir, "shares")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	svc := shares.New(st, ctl, shares.Options{ShareRoot: root, Logger: log, ReconcileInterval: -1, Support: ctl.shareSupport})
	ctl.Controller = newControllerIn(t, dir, st, controller.Options{Logger: log, Parts: []part.Part{svc}}, disks.Options{})
	tt := newTestTokens(t)
	svcs := ctlServices(ctl.Controller)
	svcs.Instances, svcs.Shares = ctl, svc
	srv := httptest.NewServer(api.NewHandler(svcs, log, tt.auth))
	t.Cleanup(srv.Close)
	return &sharesAPI{st: st, ctl: ctl, root: root, admin: client.NewTCP(srv.URL, tt.root), a: client.NewTCP(srv.URL, tt.alice), b: client.NewTCP(srv.URL, tt.bob),
		base: srv.URL, adminTok: tt.root, logs: &logs.Buffer}
}

func (s *sharesAPI) snapshot(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	recs, err := s.st.Records(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		fmt.Fprintf(&b, "%s v%d %s\n", r.Key, r.Version, r.Value)
	}
	insts, _ := s.st.Instances(ctx)
	for _, in := range insts {
		v, _ := s.st.DocumentVersion(ctx, in.UUID)
		fmt.Fprintf(&b, "instance %s rev %d doc %d\n", in.Name, in.Revision, v)
	}
	return b.String()
}

// raw sends a request with the admin token and returns status and body.
func (s *sharesAPI) raw(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	return do(t, method, s.base+path, s.adminTok, body)
}

// TestServerSharesAPI: Nova's server shares API with its bodies and
// codes: 202 attach and detach with {"share": …}, the tag defaulting to
// the share id, export_location for admins only, the list and the show.
func TestServerSharesAPI(t *testing.T) {
	s := newSharesAPI(t)
	ctx := context.Background()
	inst, err := s.a.Apply(ctx, []byte("name: web-1\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.root, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sh, err := s.admin.CreateShare(ctx, types.ShareCreateRequest{ProjectID: "a", Proto: "local", ExportLocation: dir, Name: "data"})
	if err != nil {
		t.Fatal(err)
	}

	code, body := s.raw(t, http.MethodPost, "/v1/servers/"+inst.Spec.UUID+"/shares", `{"share": {"share_id": "`+sh.ID+`"}}`)
	var got types.ServerShareBody
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusAccepted {
		t.Fatalf("attach: %d %s", code, body)
	}
	if got.Share.ShareID != sh.ID || got.Share.Tag != sh.ID || got.Share.Status != types.ShareInactive || got.Share.ExportLocation != dir {
		t.Errorf("attach answered %+v", got.Share)
	}
	// The member sees it without the export location, in list and show.
	ms, err := s.a.ServerShares(ctx, "web-1")
	if err != nil || len(ms) != 1 || ms[0].ExportLocation != "" || ms[0].InstanceUUID != "" || ms[0].Status != types.ShareInactive {
		t.Errorf("member list: %+v %v", ms, err)
	}
	code, body = s.raw(t, http.MethodGet, "/v1/servers/web-1/shares", "")
	if code != http.StatusOK || !strings.Contains(body, `"shares":[`) || !strings.Contains(body, `"export_location":"`+dir) {
		t.Errorf("admin list: %d %s", code, body)
	}
	m, err := s.a.ServerShare(ctx, inst.Spec.UUID, sh.ID)
	if err != nil || m.ExportLocation != "" || m.Tag != sh.ID {
		t.Errorf("member show: %+v %v", m, err)
	}
	if reg, err := s.a.Share(ctx, sh.ID); err != nil || reg.ExportLocation != "" || !reg.Locked {
		t.Errorf("member registry show: %+v %v", reg, err)
	}
	// Delete of the locked share: 409 naming the instance.
	code, body = s.raw(t, http.MethodDelete, "/v1/shares/"+sh.ID, "")
	if code != http.StatusConflict || !strings.Contains(body, "web-1") {
		t.Errorf("delete of a locked share: %d %s", code, body)
	}
	code, body = s.raw(t, http.MethodDelete, "/v1/servers/web-1/shares/"+sh.ID, "")
	if code != http.StatusAccepted || !strings.Contains(body, `"status":"detaching"`) {
		t.Errorf("detach: %d %s", code, body)
	}
	if code, body = s.raw(t, http.MethodDelete, "/v1/shares/"+sh.ID, ""); code != http.StatusNoContent {
		t.Errorf("delete of a detached share: %d %s", code, body)
	}
	if strings.Contains(s.logs.String(), dir) {
		t.Errorf("a log line carries the export location:\n%s", s.logs.String())
	}
}

// TestServerSharesRefused: every bad request of the issue gets a clear
// error with its status, and changes nothing.
func TestServerSharesRefused(t *testing.T) {
	s := newSharesAPI(t)
	ctx := context.Background()
	for _, n := range []string{"a-1", "a-2"} {
		if _, err := s.a.Apply(ctx, []byte("name: "+n+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.b.Apply(ctx, []byte("name: b-1\n")); err != nil {
		t.Fatal(err)
	}
	mk := func(project string) string {
		d, err := os.MkdirTemp(s.root, "d-")
		if err != nil {
			t.Fatal(err)
		}
		sh, err := s.admin.CreateShare(ctx, types.ShareCreateRequest{ProjectID: project, Proto: "local", ExportLocation: d})
		if err != nil {
			t.Fatal(err)
		}
		return sh.ID
	}
	shA, shA2, shB, shGone := mk("a"), mk("a"), mk("b"), mk("a")
	gone, err := s.admin.Share(ctx, shGone)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(gone.ExportLocation); err != nil {
		t.Fatal(err)
	}
	if _, err := s.a.AttachShare(ctx, "a-1", types.ServerShareAttach{ShareID: shA, Tag: "data"}); err != nil {
		t.Fatal(err)
	}
	unknown := "00000000-0000-4000-8000-000000000000"
	for _, tc := range []struct {
		name   string
		as     *client.Client
		server string
		req    types.ServerShareAttach
		detach string // detach this share instead of attaching
		state  string
		nomem  bool // the host cannot share guest memory
		status int
		says   string
	}{
		{name: "malformed share uuid", as: s.a, server: "a-2", req: types.ServerShareAttach{ShareID: "not-a-uuid"}, status: 400, says: "share.share_id: \"not-a-uuid\": must be a UUID"},
		{name: "tag over 64 bytes", as: s.a, server: "a-2", req: types.ServerShareAttach{ShareID: shA2, Tag: strings.Repeat("t", 65)}, status: 400, says: "is 65 bytes: a share tag is at most 36 bytes, the size of the tag field of QEMU's virtio-fs device"},
		{name: "tag over QEMU's 36 bytes", as: s.a, server: "a-2", req: types.ServerShareAttach{ShareID: shA2, Tag: strings.Repeat("t", 37)}, status: 400, says: "is 37 bytes: a share tag is at most 36 bytes, the size of the tag field of QEMU's virtio-fs device"},
		{name: "non-ASCII tag", as: s.a, server: "a-2", req: types.ServerShareAttach{ShareID: shA2, Tag: "daté"}, status: 400, says: "must contain only ASCII letters, digits and '-'"},
		{name: "tag with a slash", as: s.a, server: "a-2", req: types.ServerShareAttach{ShareID: shA2, Tag: "a/b"}, status: 400, says: "letters, digits and '-'"},
		{name: "tag already used", as: s.a, server: "a-1", req: types.ServerShareAttach{ShareID: shA2, Tag: "data"}, status: 409, says: `share.tag "data" is already used`},
		{name: "attached twice", as: s.a, server: "a-1", req: types.ServerShareAttach{ShareID: shA, Tag: "other"}, status: 409, says: "already attached"},
		{name: "another project's share", as: s.a, server: "a-2", req: types.ServerShareAttach{ShareID: shB}, status: 403, says: "another project"},
		{name: "admin: share and server of different projects", as: s.admin, server: "a-2", req: types.ServerShareAttach{ShareID: shB}, status: 403, says: "belongs to project b, server a-2 to project a"},
		{name: "unknown share", as: s.a, server: "a-2", req: types.ServerShareAttach{ShareID: unknown}, status: 404, says: "share " + unknown},
		{name: "unknown server", as: s.a, server: "nope", req: types.ServerShareAttach{ShareID: shA2}, status: 404, says: "server nope"},
		{name: "another project's server", as: s.a, server: "b-1", req: types.ServerShareAttach{ShareID: shA2}, status: 404, says: "server b-1"},
		{name: "attach to a running server", as: s.a, server: "a-2", req: types.ServerShareAttach{ShareID: shA2}, state: "running", status: 409, says: "the instance is running; shares are attached to SHUTOFF instances"},
		{name: "detach from a running server", as: s.a, server: "a-1", detach: shA, state: "running", status: 409, says: "SHUTOFF or ERROR"},
		{name: "detach a share not attached", as: s.a, server: "a-2", detach: shA, status: 404, says: "not attached"},
		{name: "detach malformed uuid", as: s.a, server: "a-1", detach: "xyz", status: 400, says: "must be a UUID"},
		{name: "the share's directory is gone", as: s.a, server: "a-2", req: types.ServerShareAttach{ShareID: shGone}, status: 409, says: "the share's directory is missing"},
		{name: "memory cannot be shared", as: s.a, server: "a-2", req: types.ServerShareAttach{ShareID: shA2}, nomem: true, status: 409, says: "cannot share guest memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.ctl.mu.Lock()
			s.ctl.state = map[string]string{}
			s.ctl.unsupported = tc.nomem
			if tc.state != "" {
				s.ctl.state[tc.server] = tc.state
			}
			s.ctl.mu.Unlock()
			before := s.snapshot(t)
			var err error
			if tc.detach != "" {
				_, err = tc.as.DetachShare(ctx, tc.server, tc.detach, false)
			} else {
				_, err = tc.as.AttachShare(ctx, tc.server, tc.req)
			}
			if status(err) != tc.status || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v (status %d); want %d saying %q", err, status(err), tc.status, tc.says)
			}
			if after := s.snapshot(t); after != before {
				t.Errorf("refused request changed something:\n%s\n---\n%s", before, after)
			}
		})
	}
	s.ctl.mu.Lock()
	s.ctl.state = map[string]string{}
	s.ctl.mu.Unlock()

	// Field errors come back as fields.
	code, body := s.raw(t, http.MethodPost, "/v1/servers/a-2/shares", `{"share": {"share_id": "x", "tag": "`+strings.Repeat("y", 70)+`"}}`)
	if code != 400 || !strings.Contains(body, `"field":"share.share_id"`) {
		t.Errorf("bad body: %d %s", code, body)
	}
	if code, body = s.raw(t, http.MethodPost, "/v1/servers/a-2/shares", `{"share": {"share_id": "`+shA2+`", "bogus": 1}}`); code != 400 {
		t.Errorf("unknown field: %d %s", code, body)
	}
	// A bad share definition: 400 naming the field; its value is in the
	// answer (to the admin who sent it) but not in the log line.
	_, err = s.admin.CreateShare(ctx, types.ShareCreateRequest{ProjectID: "a", Proto: "nfs", ExportLocation: "secret-filer/x"})
	if status(err) != 400 || !strings.Contains(err.Error(), `export_location: "secret-filer/x": is not an NFS export`) {
		t.Errorf("bad export: %v", err)
	}
	if _, err := s.admin.CreateShare(ctx, types.ShareCreateRequest{ProjectID: "a", Proto: "local", ExportLocation: filepath.Join(s.root, "missing")}); status(err) != 400 || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing local export: %v", err)
	}
	if strings.Contains(s.logs.String(), "secret-filer") || !strings.Contains(s.logs.String(), "export_location: is not an NFS export") {
		t.Errorf("the refusal's log line:\n%s", s.logs.String())
	}

	// Members neither create nor delete shares; they do not see b's.
	if _, err := s.a.CreateShare(ctx, types.ShareCreateRequest{ProjectID: "a", Proto: "nfs", ExportLocation: "f:/x"}); status(err) != 403 {
		t.Errorf("member create: %v", err)
	}
	if err := s.a.DeleteShare(ctx, shA2); status(err) != 403 {
		t.Errorf("member delete: %v", err)
	}
	if _, err := s.a.Share(ctx, shB); status(err) != 403 {
		t.Errorf("member show of b's share: %v", err)
	}
	if l, err := s.a.Shares(ctx); err != nil || len(l) != 3 {
		t.Errorf("member list: %d %v, want a's three shares", len(l), err)
	}
}

// TestSharesNotServed: without the share service the share paths answer
// 501.
func TestSharesNotServed(t *testing.T) {
	url := newTestServer(t, api.Handler(api.Services{}, slog.New(slog.DiscardHandler)))
	resp, err := http.Get(url + "/v1/servers/x/shares")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("status %d, want 501", resp.StatusCode)
	}
}
