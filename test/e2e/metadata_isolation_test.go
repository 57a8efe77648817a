package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/internal/testenv"
)

// isoInstance is one of the isolation test's instances.
type isoInstance struct {
	name, uuid, tenant, addr, userData string
	// hostname is the spec's hostname; the name when empty.
	hostname string
}

func isolationInstances(n int) []isoInstance {
	out := make([]isoInstance, n)
	for i := range out {
		k := i + 1
		out[i] = isoInstance{
			name:   fmt.Sprintf("iso-%03d", k),
			uuid:   fmt.Sprintf("1501a7e0-0000-4000-8000-%012d", k),
			tenant: fmt.Sprintf("tenant-%03d", k),
			addr:   fmt.Sprintf("127.10.0.%d", k),
			// Something only this instance may ever read.
			userData: fmt.Sprintf("#cloud-config\n# secret of instance %d: %s\n", k, strings.Repeat(fmt.Sprintf("%02x", k), 8)),
		}
	}
	return out
}

func (in isoInstance) spec() string {
	ud, _ := json.Marshal(in.userData)
	host := in.hostname
	if host == "" {
		host = in.name
	}
	return fmt.Sprintf(`name: %s
uuid: %s
hostname: %s
project_id: %s
availability_zone: nova
addresses: [%s]
public_keys:
  - name: key-%s
    data: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIsolationKeyIsolationKeyIsolationKey%s %s@vmeta
user_data: %s
`, in.name, in.uuid, host, in.tenant, in.addr, in.name, strings.ReplaceAll(in.name, "-", ""), in.name, ud)
}

// nova signature: hex HMAC-SHA256 of the instance id with the shared
// secret.
func novaSignature(secret, id string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// isoTally counts cross-read attempts and refusals by kind.
type isoTally struct {
	mu       sync.Mutex
	attempts map[string]int
	refused  map[string]int
}

func (c *isoTally) add(kind string, refused bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts[kind]++
	if refused {
		c.refused[kind]++
	}
}

func (c *isoTally) totals() (attempts, refused int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.attempts {
		attempts += n
		refused += c.refused[k]
	}
	return attempts, refused
}

// TestMetadataIsolation publishes 100 instances, each with its own
// loopback address, tenant and secret user data, through hostctl to
// Redis, and checks with both the vmeta-metadata replica (tokens
// required) and hostctl's own metadata service (tokens optional) that each
// instance reads exactly its own document and that every attempt to read
// another's is refused. Both servers trust the proxy network
// 127.99.0.0/16 with a shared secret, so the proxy-header checks are
// live.
func TestMetadataIsolation(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	redis := testenv.StartRedisServer(t)

	const (
		secret      = "isolation-proxy-secret-current"
		priorSecret = "isolation-proxy-secret-prior"
		wrongSecret = "not-the-proxy-secret"
		proxyAddr   = "127.99.0.1" // inside the trusted network
		n           = 100
	)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "proxy.secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"+priorSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonOptions{Store: redis.URL(), Args: []string{
		"--metadata-trusted-proxies", "127.99.0.0/16",
		"--metadata-proxy-secret-file", secretFile,
	}})
	rep := startReplica(t, redis.URL(),
		"--trusted-proxies", "127.99.0.0/16",
		"--proxy-secret-file", secretFile,
		"--token-policy", "required",
		"--token-key-file", filepath.Join(dir, "replica-token.key"),
	)

	// Publish the instances through the admin API, 8 at a time.
	insts := isolationInstances(n)
	admin := client.NewUnix(d.Socket)
	pubStart := time.Now()
	parallel(t, n, 8, func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		inst, err := admin.Apply(ctx, []byte(insts[i].spec()))
		if err != nil {
			return fmt.Errorf("apply %s: %w", insts[i].name, err)
		}
		if inst.Spec == nil || inst.Spec.UUID != insts[i].uuid {
			return fmt.Errorf("apply %s: published %+v, want uuid %s", insts[i].name, inst.Spec, insts[i].uuid)
		}
		return nil
	})
	published := time.Since(pubStart)
	if t.Failed() {
		t.FailNow()
	}

	type server struct {
		name     string
		addr     string
		required bool // tokens required
	}
	servers := []server{
		{"replica (vmeta-metadata, tokens required)", rep.Addr, true},
		{"hostctl serve (tokens optional)", d.MetadataAddr, false},
	}

	// leaked reports the uuids of instances other than own that occur in
	// body.
	leaked := func(body []byte, own int) []string {
		var out []string
		for j, in := range insts {
			if j != own && bytes.Contains(body, []byte(in.uuid)) {
				out = append(out, in.uuid)
			}
		}
		return out
	}
	tokenHeader := func(tok string) string { return "X-aws-ec2-metadata-token: " + tok }

	// Phase 1: every instance takes a session token from each server and
	// reads its own documents.
	tokens := make([][]string, len(servers)) // server -> instance -> token
	for si := range servers {
		tokens[si] = make([]string, n)
	}
	parallel(t, n, 16, func(i int) error {
		in := insts[i]
		for si, sv := range servers {
			r, err := rawPut(in.addr, sv.addr, "/latest/api/token", "X-aws-ec2-metadata-token-ttl-seconds: 300")
			if err != nil {
				return fmt.Errorf("%s: %s: PUT /latest/api/token: %w", sv.name, in.name, err)
			}
			if r.status != http.StatusOK || len(r.body) == 0 {
				return fmt.Errorf("%s: %s: PUT /latest/api/token: status %d body %q", sv.name, in.name, r.status, r.body)
			}
			tokens[si][i] = string(r.body)
			var auth []string
			if sv.required {
				auth = []string{tokenHeader(tokens[si][i])}
				// Without a token: 401 (not a cross-read; the policy is on).
				r, err := rawGet(in.addr, sv.addr, "/openstack/latest/meta_data.json")
				if err != nil {
					return fmt.Errorf("%s: %s: GET without a token under the required policy: %w", sv.name, in.name, err)
				}
				if r.status != http.StatusUnauthorized {
					return fmt.Errorf("%s: %s: GET without a token under the required policy: status %d, want 401", sv.name, in.name, r.status)
				}
			}
			r, err = rawGet(in.addr, sv.addr, "/openstack/latest/meta_data.json", auth...)
			if err != nil {
				return fmt.Errorf("%s: %s: GET its own meta_data.json: %w", sv.name, in.name, err)
			}
			if r.status != http.StatusOK {
				return fmt.Errorf("%s: %s: GET its own meta_data.json: status %d body %q", sv.name, in.name, r.status, r.body)
			}
			var md struct {
				UUID      string `json:"uuid"`
				ProjectID string `json:"project_id"`
				Name      string `json:"name"`
			}
			if err := json.Unmarshal(r.body, &md); err != nil {
				return fmt.Errorf("%s: %s (from %s) read meta_data.json %s: %w", sv.name, in.name, in.addr, r.body, err)
			}
			if md.UUID != in.uuid || md.ProjectID != in.tenant || md.Name != in.name {
				return fmt.Errorf("%s: %s (from %s) read meta_data.json %s, want uuid %s, project %s", sv.name, in.name, in.addr, r.body, in.uuid, in.tenant)
			}
			if l := leaked(r.body, i); len(l) > 0 {
				return fmt.Errorf("%s: %s's own meta_data.json names other instances %v", sv.name, in.name, l)
			}
			r, err = rawGet(in.addr, sv.addr, "/openstack/latest/user_data", auth...)
			if err != nil {
				return fmt.Errorf("%s: %s: GET its own user_data: %w", sv.name, in.name, err)
			}
			if r.status != http.StatusOK || string(r.body) != in.userData {
				return fmt.Errorf("%s: %s: GET its own user_data: status %d body %q, want %q", sv.name, in.name, r.status, r.body, in.userData)
			}
		}
		return nil
	})
	if t.Failed() {
		t.FailNow()
	}

	// Positive controls (not counted): the trusted proxy, signing with
	// the current or the prior secret and naming the right tenant, does
	// get the instance's document from hostctl's service (optional
	// tokens). So the refusals below are the checks at work, not a
	// misconfigured secret.
	for _, sec := range []string{secret, priorSecret} {
		in := insts[41]
		r, err := rawGet(proxyAddr, d.MetadataAddr, "/openstack/latest/meta_data.json",
			"X-Instance-ID: "+in.uuid, "X-Tenant-ID: "+in.tenant, "X-Instance-ID-Signature: "+novaSignature(sec, in.uuid))
		if err != nil || r.status != http.StatusOK || !bytes.Contains(r.body, []byte(in.uuid)) {
			t.Fatalf("control: a signed proxy request for %s from the trusted proxy %s: %v status %d body %q, want 200 with its document", in.name, proxyAddr, err, r.status, r.body)
		}
	}

	// Phase 2: cross-read attempts. Instance i attacks a different victim
	// j for each kind of attempt, on each server.
	type attempt struct {
		kind    string
		from    string   // source address
		target  string   // request target, sent as is
		headers []string // header lines, duplicates kept
		// want is the status that refuses it; 0: the request is answered
		// with the caller's own document (the spoofed parts ignored).
		want int
		// ownOr404: a path trick, answered with the caller's own data
		// or 404.
		ownOr404 bool
	}
	tally := map[string]*isoTally{}
	for _, sv := range servers {
		tally[sv.name] = &isoTally{attempts: map[string]int{}, refused: map[string]int{}}
	}
	const md = "/openstack/latest/meta_data.json"
	parallel(t, n, 16, func(i int) error {
		me := insts[i]
		victim := func(k int) (int, isoInstance) { j := (i + 1 + 7*k) % n; return j, insts[j] }
		for si, sv := range servers {
			var own []string
			if sv.required {
				own = []string{tokenHeader(tokens[si][i])}
			}
			with := func(h ...string) []string { return append(append([]string(nil), own...), h...) }
			var atts []attempt
			add := func(a attempt) { atts = append(atts, a) }
			k := 0
			next := func() isoInstance { _, v := victim(k); k++; return v }

			// From the instance itself (an untrusted peer): proxy
			// headers and X-Forwarded-For are ignored.
			v := next()
			add(attempt{kind: "X-Instance-ID/X-Tenant-ID from an untrusted peer", from: me.addr, target: md,
				headers: with("X-Instance-ID: "+v.uuid, "X-Tenant-ID: "+v.tenant)})
			v = next()
			add(attempt{kind: "validly signed proxy headers from an untrusted peer", from: me.addr, target: md,
				headers: with("X-Instance-ID: "+v.uuid, "X-Tenant-ID: "+v.tenant, "X-Instance-ID-Signature: "+novaSignature(secret, v.uuid))})
			v = next()
			add(attempt{kind: "X-Forwarded-For from an untrusted peer", from: me.addr, target: md,
				headers: with("X-Forwarded-For: " + v.addr)})
			v = next()
			add(attempt{kind: "X-Forwarded-For + X-Real-IP + Forwarded from an untrusted peer", from: me.addr, target: md,
				headers: with("X-Forwarded-For: "+v.addr+", "+me.addr, "X-Real-IP: "+v.addr, "Forwarded: for="+v.addr)})
			v = next()
			add(attempt{kind: "absolute-form request target naming another instance", from: me.addr,
				target: "http://" + v.addr + md, headers: with("Host: " + v.addr)})
			v = next()
			add(attempt{kind: "Host header naming another instance", from: me.addr, target: md,
				headers: with("Host: " + v.addr)})
			v = next()
			add(attempt{kind: "path /openstack/latest/../../<uuid>", from: me.addr,
				target: "/openstack/latest/../../" + v.uuid, headers: with(), ownOr404: true})
			v = next()
			add(attempt{kind: "path /openstack/latest/../../<uuid>/openstack/latest/meta_data.json", from: me.addr,
				target: "/openstack/latest/../../" + v.uuid + md, headers: with(), ownOr404: true})
			v = next()
			add(attempt{kind: "path //<address>/openstack/latest/meta_data.json", from: me.addr,
				target: "//" + v.addr + md, headers: with(), ownOr404: true})
			v = next()
			add(attempt{kind: "path %2e%2e", from: me.addr,
				target: "/openstack/latest/%2e%2e/%2e%2e/" + v.uuid + "%2fmeta_data.json", headers: with(), ownOr404: true})
			v = next()
			add(attempt{kind: "path /openstack/<uuid>/meta_data.json", from: me.addr,
				target: "/openstack/" + v.uuid + "/meta_data.json", headers: with(), ownOr404: true})
			v = next()
			add(attempt{kind: "query ?uuid=<uuid>", from: me.addr,
				target: md + "?uuid=" + v.uuid + "&instance_id=" + v.uuid, headers: with(), ownOr404: true})
			// Session tokens are bound to the instance (and address)
			// that asked for them.
			j, v := victim(k)
			k++
			add(attempt{kind: "another instance's session token", from: me.addr, target: md,
				headers: []string{tokenHeader(tokens[si][j])}, want: http.StatusUnauthorized})
			j, v = victim(k)
			k++
			add(attempt{kind: "another instance's session token with its X-Forwarded-For", from: me.addr, target: "/openstack/latest/user_data",
				headers: []string{tokenHeader(tokens[si][j]), "X-Forwarded-For: " + v.addr}, want: http.StatusUnauthorized})

			// From the trusted proxy network: Nova's header checks.
			v = next()
			add(attempt{kind: "proxy: wrong signature", from: proxyAddr, target: md, want: http.StatusForbidden,
				headers: []string{"X-Instance-ID: " + v.uuid, "X-Tenant-ID: " + v.tenant, "X-Instance-ID-Signature: " + novaSignature(wrongSecret, v.uuid)}})
			v = next()
			add(attempt{kind: "proxy: the caller's own signature for another id", from: proxyAddr, target: md, want: http.StatusForbidden,
				headers: []string{"X-Instance-ID: " + v.uuid, "X-Tenant-ID: " + v.tenant, "X-Instance-ID-Signature: " + novaSignature(secret, me.uuid)}})
			v = next()
			add(attempt{kind: "proxy: missing signature", from: proxyAddr, target: md, want: http.StatusBadRequest,
				headers: []string{"X-Instance-ID: " + v.uuid, "X-Tenant-ID: " + v.tenant}})
			v = next()
			add(attempt{kind: "proxy: missing tenant", from: proxyAddr, target: md, want: http.StatusBadRequest,
				headers: []string{"X-Instance-ID: " + v.uuid, "X-Instance-ID-Signature: " + novaSignature(secret, v.uuid)}})
			v = next()
			add(attempt{kind: "proxy: duplicated X-Instance-ID", from: proxyAddr, target: md, want: http.StatusBadRequest,
				headers: []string{"X-Instance-ID: " + me.uuid, "X-Instance-ID: " + v.uuid, "X-Tenant-ID: " + v.tenant, "X-Instance-ID-Signature: " + novaSignature(secret, v.uuid)}})
			v = next()
			add(attempt{kind: "proxy: duplicated X-Tenant-ID", from: proxyAddr, target: md, want: http.StatusBadRequest,
				headers: []string{"X-Instance-ID: " + v.uuid, "X-Tenant-ID: " + me.tenant, "X-Tenant-ID: " + v.tenant, "X-Instance-ID-Signature: " + novaSignature(secret, v.uuid)}})
			v = next()
			add(attempt{kind: "proxy: correct signature, wrong tenant", from: proxyAddr, target: md, want: http.StatusNotFound,
				headers: []string{"X-Instance-ID: " + v.uuid, "X-Tenant-ID: " + me.tenant, "X-Instance-ID-Signature: " + novaSignature(secret, v.uuid)}})

			for _, a := range atts {
				ownIdx := i
				if a.from == proxyAddr {
					ownIdx = -1 // nobody's data may come back
				}
				r, err := rawGet(a.from, sv.addr, a.target, a.headers...)
				if err != nil {
					tally[sv.name].add(a.kind, false)
					t.Errorf("%s: %s (from %s, %s): %v", sv.name, a.kind, a.from, a.target, err)
					continue
				}
				// Refused: no other instance's uuid anywhere in the
				// answer, and the answer expected: the refusing status,
				// or for ignored spoofing the caller's own document
				// (404 too for a path trick naming no real path).
				var why string
				isOwn := r.status == http.StatusOK && bytes.Contains(r.body, []byte(me.uuid))
				switch l := leaked(r.body, ownIdx); {
				case len(l) > 0:
					why = fmt.Sprintf("status %d and the response names other instances %v", r.status, l)
				case a.want != 0:
					if r.status != a.want {
						why = fmt.Sprintf("status %d, want %d", r.status, a.want)
					}
				case a.ownOr404:
					if !isOwn && r.status != http.StatusNotFound {
						why = fmt.Sprintf("status %d, want 404 or the caller's own document (uuid %s)", r.status, me.uuid)
					}
				default:
					if !isOwn {
						why = fmt.Sprintf("status %d, want the caller's own document (uuid %s)", r.status, me.uuid)
					}
				}
				refused := why == ""
				tally[sv.name].add(a.kind, refused)
				if !refused {
					t.Errorf("%s: cross-read NOT refused: %s: %s from %s, headers %q: %s; body %.300q", sv.name, a.kind, a.target, a.from, a.headers, why, r.body)
				}
			}
		}
		return nil
	})

	total, totalRefused := 0, 0
	var kinds []string
	for _, sv := range servers {
		a, r := tally[sv.name].totals()
		total += a
		totalRefused += r
		t.Logf("isolation: %s: %d cross-read attempts, %d refused", sv.name, a, r)
		if kinds == nil {
			for k := range tally[sv.name].attempts {
				kinds = append(kinds, k)
			}
			sort.Strings(kinds)
		}
	}
	t.Logf("isolation: refused/attempted, replica | hostctl, by kind:")
	for _, k := range kinds {
		rt, ht := tally[servers[0].name], tally[servers[1].name]
		t.Logf("  %3d/%3d | %3d/%3d  %s", rt.refused[k], rt.attempts[k], ht.refused[k], ht.attempts[k], k)
	}
	t.Logf("isolation: %d instances, %d cross-read attempts, %d refused (published in %s; whole test %s)",
		n, total, totalRefused, published.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	if total == 0 || totalRefused != total {
		t.Errorf("isolation: %d of %d cross-read attempts were not refused", total-totalRefused, total)
	}

	// No secret in any log line: user data, the proxy secrets, tokens.
	for _, lg := range []struct{ who, text string }{{"vmeta-metadata", rep.Log()}, {"hostctl serve", d.Log()}} {
		for _, sec := range []string{secret, priorSecret} {
			if strings.Contains(lg.text, sec) {
				t.Errorf("%s logged the proxy secret", lg.who)
			}
		}
		for i, in := range insts {
			if strings.Contains(lg.text, in.userData[len("#cloud-config\n"):]) {
				t.Errorf("%s logged the user data of %s", lg.who, in.name)
			}
			for si := range servers {
				if strings.Contains(lg.text, tokens[si][i]) {
					t.Errorf("%s logged a session token of %s", lg.who, in.name)
				}
			}
		}
	}
}

// rawPut sends a PUT with an empty body (the token request) from the
// local address from.
func rawPut(from, addr, target string, headers ...string) (httpResult, error) {
	return rawRequest("PUT", from, addr, target, append(headers, "Content-Length: 0")...)
}

// parallel runs f(0) … f(n-1) on workers goroutines and reports each
// error with t.Error.
func parallel(t testing.TB, n, workers int, f func(i int) error) {
	t.Helper()
	idx := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range idx {
				if err := f(i); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range n {
		idx <- i
	}
	close(idx)
	wg.Wait()
}
