package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// TestMetadataThroughProxy puts a real nginx (Debian's nginx-light,
// appending X-Forwarded-For with $proxy_add_x_forwarded_for as its
// documentation and most configurations do) in front of both metadata
// services on one Redis, and has three guests ask through it with every
// spoofed header a guest can send:
//
//   - hostctl serve trusts nginx's source network without a proxy secret:
//     it names the guest by the X-Forwarded-For entry nginx added, so each
//     guest reads its own document, whatever it put in front;
//   - vmeta-metadata trusts the same network with a proxy secret: nginx
//     signs (X-Instance-ID, X-Tenant-ID and X-Instance-ID-Signature from a
//     map of the guests' addresses, the signatures computed when the
//     configuration was written), so each guest reads its own document, and
//     a caller nginx cannot name is refused whatever X-Forwarded-For says.
//
// No answer may carry another guest's uuid. An instance that claims the
// proxy's address is refused at apply.
func TestMetadataThroughProxy(t *testing.T) {
	t.Parallel()
	nginxBin := testenv.LookPath(t, "nginx")
	redis := testenv.StartRedisServer(t)

	const (
		proxyNet  = "127.77.0.0/24"
		proxyFrom = "127.77.0.1" // nginx's source address towards the metadata services
		stranger  = "127.66.0.9" // a caller that is no instance
		secret    = "proxy-e2e-shared-secret"
	)
	guests := make([]isoInstance, 3)
	for i := range guests {
		k := i + 1
		guests[i] = isoInstance{
			name:     fmt.Sprintf("px-vm%d", k),
			uuid:     fmt.Sprintf("50c5e0a1-0000-4000-8000-%012d", k),
			tenant:   fmt.Sprintf("px-tenant-%d", k),
			addr:     fmt.Sprintf("127.66.0.%d", k),
			userData: fmt.Sprintf("#cloud-config\n# proxy test secret of guest %d\n", k),
		}
	}
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "proxy.secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonOptions{Store: redis.URL(), Args: []string{"--metadata-trusted-proxies", proxyNet}})
	rep := startReplica(t, redis.URL(), "--trusted-proxies", proxyNet, "--proxy-secret-file", secretFile)
	for _, g := range guests {
		d.Apply(g.spec())
	}

	// An instance at the proxy's address is refused at apply, naming the
	// field, the address and the trusted network.
	claim := isoInstance{name: "px-claims-proxy", uuid: "50c5e0a1-0000-4000-8000-000000000099", tenant: "px-tenant-9", addr: proxyFrom, userData: "#cloud-config\n"}
	if r := d.Ctl("instance", "apply", "-f", writeSpec(t, claim.spec())); r.code == 0 ||
		!strings.Contains(r.stderr, "addresses[0]") || !strings.Contains(r.stderr, proxyFrom) || !strings.Contains(r.stderr, proxyNet) {
		t.Errorf("apply of an instance at the trusted proxy's address %s: want a refusal naming addresses[0], the address and %s; got %s", proxyFrom, proxyNet, r)
	}
	if r := d.Ctl("instance", "show", claim.name); r.code == 0 {
		t.Errorf("the refused instance was stored: %s", r)
	}

	px := startNginx(t, nginxBin, proxyFrom, d.MetadataAddr, rep.Addr, guests, secret)

	const md = "/openstack/latest/meta_data.json"
	uuidOf := func(body []byte) string {
		var m struct {
			UUID string `json:"uuid"`
		}
		_ = json.Unmarshal(body, &m)
		return m.UUID
	}
	leaked := func(body []byte, own int) []string {
		var out []string
		for j, g := range guests {
			if j != own && strings.Contains(string(body), g.uuid) {
				out = append(out, g.name)
			}
		}
		return out
	}
	type via struct {
		name string
		addr string
	}
	proxies := []via{
		{"nginx → hostctl serve (X-Forwarded-For, no secret)", px.unsigned},
		{"nginx → vmeta-metadata (signed by nginx)", px.signed},
	}
	attempts, ownData, leaks := 0, 0, 0
	for i, me := range guests {
		nb := guests[(i+1)%len(guests)]
		nb2 := guests[(i+2)%len(guests)]
		spoofs := []struct {
			kind    string
			headers []string
		}{
			{"no header", nil},
			{"X-Forwarded-For: neighbour (the issue's case)", []string{"X-Forwarded-For: " + nb.addr}},
			{"X-Forwarded-For: neighbour, proxy", []string{"X-Forwarded-For: " + nb.addr + ", " + proxyFrom}},
			{"X-Forwarded-For: neighbour, proxy network, neighbour", []string{"X-Forwarded-For: " + nb.addr + ", 127.77.0.200, " + nb2.addr}},
			{"two X-Forwarded-For lines", []string{"X-Forwarded-For: " + nb.addr, "X-Forwarded-For: " + nb2.addr}},
			{"X-Forwarded-For garbage", []string{"X-Forwarded-For: not-an-address, ,"}},
			{"X-Real-IP and Forwarded", []string{"X-Real-IP: " + nb.addr, "Forwarded: for=" + nb.addr}},
			{"neighbour's X-Instance-ID, wrong signature", []string{"X-Instance-ID: " + nb.uuid, "X-Tenant-ID: " + nb.tenant, "X-Instance-ID-Signature: " + novaSignature("guess", nb.uuid)}},
			{"neighbour's X-Instance-ID, valid signature", []string{"X-Instance-ID: " + nb.uuid, "X-Tenant-ID: " + nb.tenant, "X-Instance-ID-Signature: " + novaSignature(secret, nb.uuid)}},
		}
		for _, p := range proxies {
			for _, sp := range spoofs {
				r, err := rawGet(me.addr, p.addr, md, sp.headers...)
				attempts++
				switch {
				case err != nil:
					t.Errorf("%s: %s from %s: %v", p.name, sp.kind, me.name, err)
				case len(leaked(r.body, i)) > 0:
					leaks++
					t.Errorf("%s: %s from %s (%s) read %v's data: %d %s", p.name, sp.kind, me.name, me.addr, leaked(r.body, i), r.status, r.body)
				case r.status != http.StatusOK || uuidOf(r.body) != me.uuid:
					t.Errorf("%s: %s from %s: %d %q, want 200 with its own document", p.name, sp.kind, me.name, r.status, r.body)
				default:
					ownData++
				}
			}
		}
	}

	// A caller nginx cannot name (no instance, not in its map): never
	// anyone's data, whatever it sends. hostctl serve finds no instance
	// at its address (404); vmeta-metadata gets no signed headers from
	// nginx and honours no X-Forwarded-For (400).
	refusals := 0
	for _, p := range []struct {
		via
		want int
	}{{proxies[0], http.StatusNotFound}, {proxies[1], http.StatusBadRequest}} {
		for _, h := range [][]string{nil, {"X-Forwarded-For: " + guests[0].addr}, {"X-Forwarded-For: " + guests[0].addr + ", " + guests[1].addr}} {
			r, err := rawGet(stranger, p.addr, md, h...)
			attempts++
			if err == nil && len(leaked(r.body, -1)) > 0 {
				leaks++
			}
			if err != nil || r.status != p.want || len(leaked(r.body, -1)) > 0 {
				t.Errorf("%s: from %s with %q: %v %d %q, want %d and no instance's data", p.name, stranger, h, err, r.status, r.body, p.want)
				continue
			}
			refusals++
		}
	}

	// The metadata services themselves, asked from the trusted network
	// directly (a proxy that adds its own X-Forwarded-For line beside the
	// client's, or names no guest), refuse.
	for _, h := range [][]string{
		{"X-Forwarded-For: " + guests[0].addr, "X-Forwarded-For: " + guests[1].addr},
		nil,
		{"X-Forwarded-For: " + proxyFrom},
	} {
		r, err := rawGet("127.77.0.2", d.MetadataAddr, md, h...)
		attempts++
		if err == nil && len(leaked(r.body, -1)) > 0 {
			leaks++
		}
		if err != nil || r.status != http.StatusBadRequest || len(leaked(r.body, -1)) > 0 {
			t.Errorf("hostctl serve, from the trusted network with %q: %v %d %q, want 400", h, err, r.status, r.body)
			continue
		}
		refusals++
	}
	t.Logf("proxy: %d requests through nginx and from the trusted network; %d guests' own documents, %d refusals, %d other instances' documents", attempts, ownData, refusals, leaks)
}

// nginxProc is a private nginx on two loopback ports: unsigned proxies to
// hostctl serve's metadata listener, signed to vmeta-metadata's.
type nginxProc struct {
	unsigned, signed string
	proc             *testenv.Process
}

// startNginx writes an nginx configuration into a temporary prefix and
// runs nginx in the foreground, one process, logging to its stderr. Both
// servers append to X-Forwarded-For ($proxy_add_x_forwarded_for) and
// connect to the upstream from bind; the signed one also sets Nova's
// proxy headers from a map of the guests' addresses (a caller not in the
// map gets none: nginx sends no header with an empty value). It stops
// nginx when the test ends.
func startNginx(t *testing.T, bin, bind, hostctlAddr, replicaAddr string, guests []isoInstance, secret string) *nginxProc {
	t.Helper()
	prefix := t.TempDir()
	for _, sub := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(prefix, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var ids, tenants, sigs strings.Builder
	for _, g := range guests {
		fmt.Fprintf(&ids, "\t\t%s %s;\n", g.addr, g.uuid)
		fmt.Fprintf(&tenants, "\t\t%s %s;\n", g.addr, g.tenant)
		fmt.Fprintf(&sigs, "\t\t%s %s;\n", g.addr, novaSignature(secret, g.uuid))
	}
	for attempt := 1; ; attempt++ {
		ports := make([]string, 2)
		for i := range ports {
			p, err := testenv.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			ports[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		}
		conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log stderr notice;
events { worker_connections 128; }
http {
	access_log off;
	client_body_temp_path %[1]s/tmp/body;
	proxy_temp_path %[1]s/tmp/proxy;
	fastcgi_temp_path %[1]s/tmp/fastcgi;
	uwsgi_temp_path %[1]s/tmp/uwsgi;
	scgi_temp_path %[1]s/tmp/scgi;
	map $remote_addr $vmeta_instance_id {
		default "";
%[6]s	}
	map $remote_addr $vmeta_tenant_id {
		default "";
%[7]s	}
	map $remote_addr $vmeta_signature {
		default "";
%[8]s	}
	server {
		listen %[2]s;
		location / {
			proxy_pass http://%[4]s;
			proxy_bind %[9]s;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
		}
	}
	server {
		listen %[3]s;
		location / {
			proxy_pass http://%[5]s;
			proxy_bind %[9]s;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
			proxy_set_header X-Instance-ID $vmeta_instance_id;
			proxy_set_header X-Tenant-ID $vmeta_tenant_id;
			proxy_set_header X-Instance-ID-Signature $vmeta_signature;
		}
	}
}
`, prefix, ports[0], ports[1], hostctlAddr, replicaAddr, ids.String(), tenants.String(), sigs.String(), bind)
		confFile := filepath.Join(prefix, "nginx.conf")
		if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-p", prefix, "-e", "stderr", "-c", confFile)
		cmd.Env = testenv.ChildEnv(nil)
		proc, err := testenv.StartProcess(t, "nginx", cmd)
		if err == nil {
			t.Cleanup(func() {
				proc.Stop()
				if t.Failed() {
					t.Logf("nginx logged:\n%s", proc.Output())
				}
			})
			err = proc.WaitReady(20*time.Second, 20*time.Millisecond, func() error {
				for _, p := range ports {
					// GET / is the EC2 version list: it needs no caller.
					r, err := rawGet("127.0.0.1", p, "/")
					if err != nil {
						return err
					}
					if r.status != http.StatusOK {
						return fmt.Errorf("GET / through nginx on %s: %d %s", p, r.status, r.body)
					}
				}
				return nil
			})
		}
		if err == nil {
			return &nginxProc{unsigned: ports[0], signed: ports[1], proc: proc}
		}
		if attempt == 5 || !strings.Contains(proc.Output(), "Address already in use") {
			t.Fatalf("start nginx: %v\nits output:\n%s\nits configuration:\n%s", err, proc.Output(), conf)
		}
	}
}
