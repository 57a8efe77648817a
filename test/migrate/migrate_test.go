// Package migrate_test runs cold migration between two real hosts on
// this machine (issue 24): two `hostctl serve` processes with their own
// data directories, host names and key-encryption keys on one real
// Redis, host a on the machine's libvirtd and host b on a second
// libvirtd in its own mount namespace (testenv.SecondLibvirtd), the host
// channel between them on loopback (mutual TLS). The instance has a LUKS
// disk made by qemu-img: its ciphertext moves, its secret is rewrapped
// under b's key, and QEMU opening the disk on b proves the passphrase
// arrived. Guests run under TCG.
package migrate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// binaries are hostctl built with -tags vmetacrash (crash points), once.
var (
	buildOnce sync.Once
	hostctl   string
)

func hostctlBin(t *testing.T) string {
	t.Helper()
	builtOnce(t) // main_test.go: in a directory that outlives t
	if hostctl == "" {
		t.Fatal("hostctl was not built")
	}
	return hostctl
}

// host is one `hostctl serve`.
type host struct {
	t                      *testing.T
	name, uri, store, bin  string
	dataDir, sock, migAddr string
	mdAddr                 string // the metadata service
	metricsAddr            string // the operator listener (/metrics)
	env                    []string
	extra                  []string // more serve flags
	proc                   *testenv.Process
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

func newHost(t *testing.T, name, uri, store string, extra ...string) *host {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return newHostAt(t, name, uri, store, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), extra...)
}

// newHostAt is newHost with the host channel's address migAddr (another
// one if that is taken when the daemon binds it).
func newHostAt(t *testing.T, name, uri, store, migAddr string, extra ...string) *host {
	dir, err := os.MkdirTemp("", "vmeta-mig-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &host{t: t, name: name, uri: uri, store: store, bin: hostctlBin(t), dataDir: filepath.Join(dir, "data"),
		sock: filepath.Join(dir, "s"), migAddr: migAddr, extra: extra}
	t.Cleanup(func() {
		h.stop()
		if t.Failed() && h.proc != nil {
			t.Logf("hostctl serve --host %s logged:\n%s", name, h.proc.Output())
		}
	})
	h.start()
	return h
}

// start starts the daemon (with h.env: VMETA_CRASH_AT for a crash run).
func (h *host) start() {
	h.t.Helper()
	// A port testenv.FreePort found free may be taken by another process
	// before the daemon binds it (the tests here start hosts in
	// parallel): the daemon then exits saying so, and starts again on
	// new ports.
	for attempt := 1; ; attempt++ {
		err := h.startOnce()
		if err == nil {
			return
		}
		out := h.proc.Output()
		if attempt < portAttempts && strings.Contains(out, "bind: address already in use") {
			if strings.Contains(out, "listen tcp "+h.migAddr+":") {
				port, perr := testenv.FreePort()
				if perr != nil {
					h.t.Fatal(perr)
				}
				h.migAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			}
			h.t.Logf("host %s: a port was taken before it bound it; starting it again on new ports", h.name)
			continue
		}
		h.t.Fatalf("start host %s: %v\n%s", h.name, err, out)
	}
}

// portAttempts bounds host.start's attempts after a port was taken.
const portAttempts = 5

// startOnce starts the daemon on new metadata and metrics ports and
// waits until it answers.
func (h *host) startOnce() error {
	port, err := testenv.FreePort()
	if err != nil {
		h.t.Fatal(err)
	}
	h.mdAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	mport, err := testenv.FreePort()
	if err != nil {
		h.t.Fatal(err)
	}
	h.metricsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(mport))
	args := []string{"serve", "--host", h.name, "--store", h.store, "--data-dir", h.dataDir, "--socket", h.sock,
		"--metadata-listen", h.mdAddr, "--metadata-metrics-listen", h.metricsAddr,
		"--virt", "libvirt", "--libvirt-uri", h.uri, "--domain-type", "qemu", "--domain-memory", "128",
		"--reconcile-interval", "0", "--heartbeat-interval", "200ms", "--host-down-after", "10s",
		"--migration-listen", h.migAddr, "--luks-iter-time", "10ms"}
	args = append(args, h.extra...)
	cmd := exec.Command(h.bin, args...)
	cmd.Env = testenv.ChildEnv(nil, append([]string{"VMETA_VIRT=libvirt"}, h.env...)...)
	if h.proc, err = testenv.StartProcess(h.t, "hostctl serve --host "+h.name, cmd); err != nil {
		h.t.Fatal(err)
	}
	return h.proc.WaitReady(60*time.Second, 50*time.Millisecond, func() error {
		if r := h.ctl("instance", "list"); r.code != 0 {
			return errors.New(r.String())
		}
		return nil
	})
}

func (h *host) stop() {
	if h.proc == nil {
		return
	}
	select {
	case <-h.proc.Exited():
		h.proc.Kill() // a crash point killed it: nothing to stop
	default:
		h.proc.Stop()
	}
}

// restart stops (or finds killed) the daemon and starts it with env.
func (h *host) restart(env ...string) {
	h.t.Helper()
	h.stop()
	h.env = env
	h.start()
}

// ctl runs a hostctl client command against h.
func (h *host) ctl(args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, append(args, "--socket", h.sock)...)
	cmd.Env = testenv.ChildEnv(nil)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		r.code, r.stderr = -1, err.Error()
	}
	return r
}

func (h *host) must(args ...string) result {
	h.t.Helper()
	r := h.ctl(args...)
	if r.code != 0 {
		h.t.Fatalf("hostctl %s on %s: %s", strings.Join(args, " "), h.name, r)
	}
	return r
}

// instance is `instance show NAME --output json`, what the test reads.
type instance struct {
	Host  string `json:"host"`
	State string `json:"state"`
	Spec  struct {
		UUID string `json:"uuid"`
	} `json:"spec"`
}

func (h *host) show(name string) instance {
	h.t.Helper()
	var in instance
	if err := json.Unmarshal([]byte(h.must("instance", "show", name, "--output", "json").stdout), &in); err != nil {
		h.t.Fatal(err)
	}
	return in
}

// metric is the value of the sample named series (name and labels, as
// the text format writes them) of h's /metrics ("" when absent).
func metric(t *testing.T, h *host, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + h.metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", h.name, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// specOf is the instance's stored spec as `instance show` prints it.
func specOf(t *testing.T, h *host, name string) map[string]any {
	t.Helper()
	var v struct {
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal([]byte(h.must("instance", "show", name, "--output", "json").stdout), &v); err != nil {
		t.Fatal(err)
	}
	return v.Spec
}

// migration is `instance migration NAME --output json`.
type migration struct {
	State       string  `json:"state"`
	Step        string  `json:"step"`
	Bytes       int64   `json:"bytes"`
	CopySeconds float64 `json:"copy_seconds"`
	Source      string  `json:"source"`
	Dest        string  `json:"dest"`
}

func (h *host) migration(name string) (migration, bool) {
	h.t.Helper()
	r := h.ctl("instance", "migration", name, "--output", "json")
	if r.code != 0 {
		return migration{}, false
	}
	var m migration
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		h.t.Fatal(err)
	}
	return m, true
}

// domstate is libvirt's state of domain name at uri ("" when none).
func domstate(t *testing.T, uri, name string) string {
	out, err := exec.Command("virsh", "-q", "-c", uri, "domstate", name).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "failed to get domain") {
			return ""
		}
		t.Fatalf("virsh domstate %s: %v: %s", name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// secrets is the libvirt secrets of instance uuid's disks at uri (their
// usage names the instance).
func secrets(t *testing.T, uri, uuid string) []string {
	out, err := exec.Command("virsh", "-q", "-c", uri, "secret-list").CombinedOutput()
	if err != nil {
		t.Fatalf("virsh secret-list: %v: %s", err, out)
	}
	var mine []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "/"+uuid+"/") {
			mine = append(mine, strings.TrimSpace(l))
		}
	}
	return mine
}

// pair is two hosts on one Redis, a on the machine's libvirtd, b on a
// second one.
func pair(t *testing.T, extra ...string) (a, b *host) {
	uriA := testenv.RequireLibvirt(t)
	uriB := testenv.SecondLibvirtd(t)
	redis := testenv.StartRedis(t)
	return newHost(t, "a", uriA, redis, extra...), newHost(t, "b", uriB, redis, extra...)
}

// spec is an instance with a LUKS disk and a plain one, no NIC (host b's
// libvirtd has no network).
func spec(t *testing.T, name string) string {
	p := filepath.Join(t.TempDir(), name+".yaml")
	s := fmt.Sprintf("name: %s\nproject_id: p1\naddresses: [%s]\ndisks: [{name: vda, size: 64M, tag: root, encrypted: true}, {name: vdb, size: 256M}]\n", name, guestAddr)
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// guestAddr is the loopback address the test reads the instance's
// metadata from, as its guest would (the metadata service identifies the
// caller by its source address).
var guestAddr = fmt.Sprintf("127.88.%d.%d", os.Getpid()%250+1, os.Getpid()/250%250+1)

// metadataUUID is the uuid of meta_data.json as h's metadata service
// serves it to the guest at guestAddr.
func metadataUUID(t *testing.T, h *host) string {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(guestAddr)}}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext, DisableKeepAlives: true}}
	resp, err := c.Get("http://" + h.mdAddr + "/openstack/latest/meta_data.json")
	if err != nil {
		t.Fatalf("metadata from %s: %v", h.name, err)
	}
	defer resp.Body.Close()
	var md struct {
		UUID string `json:"uuid"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&md) != nil {
		t.Fatalf("metadata from %s: %s", h.name, resp.Status)
	}
	return md.UUID
}

// TestColdMigrateReal: a running instance with a LUKS disk moves from a
// to b and is confirmed; then it moves back from b to a and is reverted.
// At each end libvirt's own view (virsh) is checked: where the domain
// runs, where its passphrase is defined.
func TestColdMigrateReal(t *testing.T) {
	t.Parallel()
	a, b := pair(t)
	name := "mig-" + strconv.Itoa(os.Getpid())
	a.must("instance", "apply", "-f", spec(t, name))
	// 128 MiB of data on the plain disk, so that the copy has something
	// to measure.
	if out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 0 128M", filepath.Join(a.dataDir, "instances", name, "disk-vdb.qcow2")).CombinedOutput(); err != nil {
		t.Fatalf("qemu-io write: %v: %s", err, out)
	}
	a.must("instance", "start", name)
	uuid := a.show(name).Spec.UUID
	if s := domstate(t, a.uri, name); s != "running" {
		t.Fatalf("on a before the move: %q", s)
	}

	start := time.Now()
	a.must("instance", "migrate", name, "--to", "b", "--timeout", "1s")
	took := time.Since(start)
	m, ok := a.migration(name)
	if !ok || m.State != "verify" || m.Dest != "b" {
		t.Fatalf("after migrate: %+v (%t)", m, ok)
	}
	if in := b.show(name); in.Host != "b" || in.State != "verify" {
		t.Fatalf("instance show on b in verify: %+v", in)
	}
	if sa, sb := domstate(t, a.uri, name), domstate(t, b.uri, name); sa != "shut off" || sb != "running" {
		t.Fatalf("in verify: a %q, b %q; want a shut off, b running (QEMU opened the LUKS disk with the moved passphrase)", sa, sb)
	}
	t.Logf("cold migration a -> b: %d bytes copied in %.2f s (%.1f s per GiB); the whole move %.1f s",
		m.Bytes, m.CopySeconds, m.CopySeconds/(float64(m.Bytes)/(1<<30)), took.Seconds())

	if got, err := strconv.ParseFloat(metric(t, a, "vmeta_hostctl_migration_bytes_total"), 64); err != nil || int64(got) != m.Bytes {
		t.Errorf("a's metrics: %v bytes sent (%v), want %d", got, err, m.Bytes)
	}
	if got := metric(t, a, `vmeta_hostctl_operation_duration_seconds_count{op="migrate"}`); got != "1" {
		t.Errorf("a's metrics: %s moves timed, want 1", got)
	}
	a.must("instance", "confirm-migration", name)
	if _, ok := a.migration(name); ok {
		t.Fatal("the move's record stays after confirm")
	}
	if s := domstate(t, a.uri, name); s != "" {
		t.Fatalf("a still has the domain after confirm: %q", s)
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "instances", name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a still has the instance's files after confirm: %v", err)
	}
	if in := b.show(name); in.Host != "b" || in.State != "running" {
		t.Fatalf("after confirm: %+v", in)
	}
	if got := metadataUUID(t, b); got != uuid {
		t.Errorf("b's metadata service serves the guest at %s uuid %q, want %s", guestAddr, got, uuid)
	}
	if s := secrets(t, a.uri, uuid); len(s) != 0 {
		t.Errorf("a still has the instance's libvirt secrets after confirm: %q", s)
	}
	if s := secrets(t, b.uri, uuid); len(s) == 0 {
		t.Error("b has no libvirt secret for the running LUKS disk")
	}

	// Back from b to a, reverted: it runs on b again with the spec it had
	// there, a holds nothing.
	before := specOf(t, b, name)
	b.must("instance", "migrate", name, "--to", "a", "--timeout", "1s")
	if sa, sb := domstate(t, a.uri, name), domstate(t, b.uri, name); sa != "running" || sb != "shut off" {
		t.Fatalf("in verify on a: a %q, b %q", sa, sb)
	}
	b.must("instance", "revert-migration", name)
	if sa, sb := domstate(t, a.uri, name), domstate(t, b.uri, name); sa != "" || sb != "running" {
		t.Fatalf("after revert: a %q, b %q; want none on a, running on b", sa, sb)
	}
	if in := b.show(name); in.Host != "b" || in.State != "running" {
		t.Fatalf("after revert: %+v", in)
	}
	if after := specOf(t, b, name); !reflect.DeepEqual(before, after) {
		t.Errorf("the spec after the revert is not the one before the move:\n%v\nbefore:\n%v", after, before)
	}
	b.must("instance", "delete", name)
}

// crashCase is one cell of the SIGKILL matrix: the host killed, the
// crash point (internal/crashpoint: hostctl built with -tags vmetacrash
// SIGKILLs itself there) and the request it is killed in.
type crashCase struct {
	side, point, request string
}

// crashCases are every step of a move, its confirm and its revert, on
// the side that does it (the source drives; the destination receives
// the disks and secrets, takes the record over, starts the domain, and
// cleans up on a revert).
func crashCases() []crashCase {
	var cs []crashCase
	for _, s := range []string{"recorded", "stopped", "disks-copied", "secrets-moved", "owner-switched", "started"} {
		cs = append(cs, crashCase{"a", s, "migrate"})
	}
	for _, s := range []string{"dest-disk-received", "dest-secret-received", "dest-owner-switched", "dest-started"} {
		cs = append(cs, crashCase{"b", s, "migrate"})
	}
	for _, s := range []string{"confirming", "source-cleaned", "secrets-forgotten"} {
		cs = append(cs, crashCase{"a", s, "confirm"})
	}
	for _, s := range []string{"reverting", "destination-cleaned", "secrets-back", "owner-back", "restarted"} {
		cs = append(cs, crashCase{"a", s, "revert"})
	}
	cs = append(cs, crashCase{"b", "dest-cleaned", "revert"})
	return cs
}

// TestKilledAtEveryStep is the SIGKILL matrix over the real hosts: for
// every step of a move, its confirm and its revert, the host doing it
// (the source, or the destination for its own steps) is killed there
// (SIGKILL, no cleanup); it is started again, the state `instance
// migration` names is read, and the request that completes it is run (a
// retry then a confirm for a move, the confirm or the revert again).
// Each case ends with the instance in the power state it began with on
// exactly one host, which owns it, and no move record; the matrix is
// logged.
//
// The rows run on crashGroups pairs of hosts at once. On a pair, one
// instance goes through its rows: each row moves it from the host that
// holds it to the other one (a and b take turns as source and
// destination), so a row costs a move, not a new instance. Only the rows
// whose step stops or starts the guest (crashRunning) move a running
// one; the others, run first, move it shut off, which passes every step
// and crash point alike. After a failed row the pair's next row starts
// from a new instance.
func TestKilledAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("the SIGKILL matrix restarts a host per step (minutes): not in -short")
	}
	t.Parallel()
	cases := crashCases()
	matrix := make([]string, len(cases))
	var wg sync.WaitGroup
	for g, rows := range crashPlan(cases, crashGroups) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(fmt.Sprintf("hosts%d", g), func(t *testing.T) {
				a, b := pair(t)
				rig := &crashRig{hosts: map[string]*host{"a": a, "b": b}, prefix: fmt.Sprintf("k%d-%d", os.Getpid(), g)}
				for _, i := range rows {
					c := cases[i]
					ok := t.Run(c.request+"/"+c.side+"/"+c.point, func(t *testing.T) {
						matrix[i] = rig.row(t, c)
					})
					a.t, b.t = t, t
					if !ok {
						rig.abandon()
					}
				}
				rig.finish(t)
			})
		}()
	}
	wg.Wait()
	t.Logf("SIGKILL matrix (request, host killed as source or destination, step, guest, state shown after the restart, final; the row's seconds):\n%s", strings.Join(matrix, "\n"))
}

// crashGroups is how many pairs of hosts TestKilledAtEveryStep runs its
// rows on at once: much of a row is waiting on libvirt, QEMU and a
// host's start-up, so three pairs gain even on two cores (measured with
// -race on the loaded two-core machine: 19 rows on one pair, an
// instance each, 556 s; on three pairs moving one instance each, 123 s).
const crashGroups = 3

// crashRunning are the crash points whose matrix row moves a running
// guest: the steps that stop it, start it on the destination or start it
// again on a revert, and the first step of a confirm, so each request
// (migrate, confirm, revert) has a running-guest path.
var crashRunning = map[string]bool{"stopped": true, "started": true, "dest-started": true, "confirming": true, "restarted": true}

// crashPlan splits the rows (indexes into cases) into n groups of about
// equal cost (a running guest's row costs several shut-off ones: QEMU
// starts and stops), each with its shut-off rows first.
func crashPlan(cases []crashCase, n int) [][]int {
	groups := make([][]int, n)
	cost := make([]int, n)
	add := func(i, c int) {
		g := 0
		for j := range cost {
			if cost[j] < cost[g] {
				g = j
			}
		}
		groups[g] = append(groups[g], i)
		cost[g] += c
	}
	for i, c := range cases {
		if crashRunning[c.point] {
			add(i, 5)
		}
	}
	for i, c := range cases {
		if !crashRunning[c.point] {
			add(i, 1)
		}
	}
	for _, g := range groups {
		sort.SliceStable(g, func(x, y int) bool { return !crashRunning[cases[g[x]].point] && crashRunning[cases[g[y]].point] })
	}
	return groups
}

// crashRig is a pair of hosts and the instance the matrix moves between
// them.
type crashRig struct {
	hosts   map[string]*host
	prefix  string
	n       int      // instances made
	name    string   // the instance ("" when a new one is needed)
	at      string   // the host that owns it
	running bool     // it runs
	left    []string // instances of failed rows
}

// abandon leaves the instance of a failed row (finish tries to delete
// it): the next row makes a new one.
func (r *crashRig) abandon() {
	if r.name != "" {
		r.left = append(r.left, r.name)
	}
	r.name = ""
}

// finish deletes the instance (and, best effort, those of failed rows).
func (r *crashRig) finish(t *testing.T) {
	t.Helper()
	if r.name != "" {
		r.hosts[r.at].must("instance", "delete", r.name)
	}
	for _, name := range r.left {
		for _, h := range r.hosts {
			h.ctl("instance", "delete", name)
		}
	}
}

// row is one row of the SIGKILL matrix: the instance (made on a when
// there is none, started when the step is in crashRunning) is moved from
// the host holding it, the source, to the other one; for a confirm or a
// revert it is first moved there without a crash. The victim, the source
// or the destination as c.side says ("a" the source, "b" the
// destination), is restarted with the crash point armed, the request run
// on the source until the victim dies, the victim started again, the
// move completed and checked. It returns the row's line of the matrix.
func (r *crashRig) row(t *testing.T, c crashCase) string {
	t.Helper()
	for _, h := range r.hosts {
		h.t = t
	}
	begin := time.Now()
	var phases []string
	at := time.Now()
	phase := func(what string) {
		phases = append(phases, fmt.Sprintf("%s %.1fs", what, time.Since(at).Seconds()))
		at = time.Now()
	}
	running := crashRunning[c.point]
	if r.name == "" {
		r.n++
		r.name, r.at, r.running = fmt.Sprintf("%s-%d", r.prefix, r.n), "a", false
		r.hosts["a"].must("instance", "apply", "-f", spec(t, r.name))
		phase("apply")
	}
	name := r.name
	src, dst := r.hosts[r.at], r.hosts[map[string]string{"a": "b", "b": "a"}[r.at]]
	switch {
	case running && !r.running:
		src.must("instance", "start", name)
		r.running = true
		phase("start")
	case !running && r.running:
		t.Fatalf("the row needs %s shut off; crashPlan orders the running rows last", name)
	}
	power := src.show(name).State
	if running && power != "running" {
		t.Fatalf("after start: %q", power)
	}
	domBefore := domstate(t, src.uri, name)
	if c.request != "migrate" {
		src.must("instance", "migrate", name, "--to", dst.name, "--timeout", "1s")
		phase("move")
	}
	victim := src
	if c.side == "b" {
		victim = dst
	}
	victim.restart("VMETA_CRASH_AT=migrate/" + c.point)
	phase("arm")
	var res result
	switch c.request {
	case "migrate":
		res = src.ctl("instance", "migrate", name, "--to", dst.name, "--timeout", "1s")
	case "confirm":
		res = src.ctl("instance", "confirm-migration", name)
	case "revert":
		res = src.ctl("instance", "revert-migration", name)
	}
	select {
	case <-victim.proc.Exited():
	case <-time.After(2 * time.Minute):
		t.Fatalf("host %s was not killed at %s; the request: %s", victim.name, c.point, res)
	}
	if res.code == 0 {
		t.Fatalf("the request succeeded though host %s was killed at %s", victim.name, c.point)
	}
	phase("killed")
	victim.restart()
	phase("restart")
	shown := "none"
	if m, ok := src.migration(name); ok {
		shown = m.State + "@" + m.Step
	}
	if in := src.show(name); shown != "none" && !strings.HasPrefix(shown, in.State) {
		t.Errorf("instance show names %q, the move is %s", in.State, shown)
	}
	// Complete it.
	owner, other := dst, src
	switch {
	case c.request == "revert":
		src.must("instance", "revert-migration", name)
		owner, other = src, dst
	case strings.HasPrefix(shown, "migrating"):
		src.must("instance", "migrate", name, "--to", dst.name, "--timeout", "1s")
		fallthrough
	default:
		src.must("instance", "confirm-migration", name)
	}
	phase("complete")
	if _, ok := src.migration(name); ok {
		t.Fatal("the move's record stays")
	}
	if in := owner.show(name); in.Host != owner.name || in.State != power {
		t.Errorf("after completing: %+v, want %s on %s", in, power, owner.name)
	}
	wantDom := "running"
	switch {
	case !running && owner == src:
		wantDom = domBefore // as it was before the move
	case !running:
		wantDom = "shut off" // defined on the destination, not started
	}
	if s, o := domstate(t, owner.uri, name), domstate(t, other.uri, name); s != wantDom || o != "" {
		t.Errorf("libvirt after completing: %s %q, %s %q; want %q and none", owner.name, s, other.name, o, wantDom)
	}
	if t.Failed() {
		return ""
	}
	r.at = owner.name
	guest := "shut-off"
	if running {
		guest = "running"
	}
	role := map[string]string{"a": "source", "b": "dest"}[c.side]
	t.Logf("row %.1fs: %s", time.Since(begin).Seconds(), strings.Join(phases, ", "))
	return fmt.Sprintf("%-8s %-6s(%s) %-22s %-8s %s->%s %-30s -> %s on %s  %5.1fs", c.request, role, victim.name, c.point, guest, src.name, dst.name, shown, power, owner.name, time.Since(begin).Seconds())
}

// gpuSysfs writes a sysfs tree laid out as the kernel does, with one
// NVIDIA A100 (10de:20b5, class 030200): each host's inventory finds it.
func gpuSysfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bus := filepath.Join(root, "bus", "pci", "devices")
	dir := filepath.Join(root, "devices", "pci0000:00", "0000:3b:00.0")
	for _, d := range []string{bus, dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range map[string]string{"vendor": "0x10de", "device": "0x20b5", "class": "0x030200"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:3b:00.0", filepath.Join(bus, "0000:3b:00.0")); err != nil {
		t.Fatal(err)
	}
	return root
}

// devices is `device list --all-hosts` on h, one line per device.
func devices(t *testing.T, h *host) map[string]string {
	t.Helper()
	var l struct {
		Devices []struct {
			Host     string `json:"host"`
			Reserved int    `json:"reserved"`
			Used     int    `json:"used"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(h.must("device", "list", "--all-hosts", "--output", "json").stdout), &l); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range l.Devices {
		out[d.Host] = fmt.Sprintf("reserved=%d used=%d", d.Reserved, d.Used)
	}
	return out
}

// TestMoveBurnsDevices: a stopped instance holding a one-time-use
// device (each host's inventory from a sysfs fixture) moves from a to b:
// b's device is claimed and burned by the move; on confirm a's stays
// burned and free, on revert b's does. The device list of every host is
// logged after each case. (The fixture's device cannot be passed to a
// running QEMU, so the instance stays stopped: its domain is defined on
// b, not started.)
func TestMoveBurnsDevices(t *testing.T) {
	t.Parallel()
	spec := filepath.Join(t.TempDir(), "devices.yaml")
	if err := os.WriteFile(spec, []byte("devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n    one_time_use: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := pair(t, "--device-spec", spec, "--sysfs-root", gpuSysfs(t), "--device-sync-interval", "0")
	for i, end := range []string{"confirm-migration", "revert-migration"} {
		name := fmt.Sprintf("otu%d-%d", os.Getpid(), i)
		p := filepath.Join(t.TempDir(), "vm.yaml")
		if err := os.WriteFile(p, []byte("name: "+name+"\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: gpu}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		a.must("instance", "apply", "-f", p)
		if got := devices(t, a); got["a"] != "reserved=1 used=1" {
			t.Fatalf("after the apply on a: %v", got)
		}
		a.must("instance", "migrate", name, "--to", "b")
		if got := devices(t, a); got["a"] != "reserved=1 used=1" || got["b"] != "reserved=1 used=1" {
			t.Fatalf("in verify: %v; want both held and burned", got)
		}
		a.must("instance", end, name)
		got := devices(t, a)
		t.Logf("device list --all-hosts after %s: a %s, b %s", end, got["a"], got["b"])
		want := map[string]string{"a": "reserved=1 used=0", "b": "reserved=1 used=1"}
		owner := b
		if end == "revert-migration" {
			want = map[string]string{"a": "reserved=1 used=1", "b": "reserved=1 used=0"}
			owner = a
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s: %v, want %v", end, got, want)
		}
		owner.must("instance", "delete", name)
		// Clean the burned devices for the next case (the operator's
		// cleaning, as the one-time-use specification has it).
		for _, h := range []*host{a, b} {
			h.must("device", "clean", "0000:3b:00.0")
		}
	}
}
