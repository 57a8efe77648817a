package e2e

// The key rotation crash matrix (issue: key rotation, "fault injection,
// the acceptance core"): hostctl serve, built with -tags vmetacrash, is
// killed by SIGKILL at every step of every rotation procedure
// (internal/crashpoint: the steps are those the procedures declare), then
// started again; it must recover and finish, and nothing may be lost:
// every secret unwraps to its value, every disk opens with the passphrase
// the key manager holds, a proxy with a valid secret keeps reading
// metadata, a valid token keeps working, and the status is right. The
// test prints the matrix: procedure × step × store → recovered / lost.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/diskrotate"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	_ "github.com/vmeta/vmeta/hostctl/metadatakeys" // its procedures' steps
	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/testenv"
)

var crashBin struct {
	once sync.Once
	path string
}

// crashHostctl builds (once) hostctl with the vmetacrash tag.
func crashHostctl(t *testing.T) string {
	t.Helper()
	crashBin.once.Do(func() {
		crashBin.path = testenv.BuildCrashBinary(t, "github.com/vmeta/vmeta/hostctl/cmd/hostctl")
		// t.TempDir of the first caller goes with it: copy to a directory
		// of the package's own.
		dir, err := os.MkdirTemp("", "vmeta-crash-bin-")
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(crashBin.path)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "hostctl")
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
		crashBin.path = p
	})
	if crashBin.path == "" {
		t.Fatal("the vmetacrash hostctl was not built")
	}
	return crashBin.path
}

// runUntilKilled starts hostctl serve with VMETA_CRASH_AT=at and waits for
// it to die. It reports whether it died by SIGKILL (the step was
// reached); a daemon still running after bound is stopped and reported as
// not killed.
func runUntilKilled(t *testing.T, opts daemonOptions, at string, bound time.Duration) (bool, string) {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "vmeta-crash-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	d := &daemon{t: t, DataDir: opts.DataDir, Socket: filepath.Join(sockDir, "hostctl.sock"), store: opts.Store, args: opts.Args,
		env: append(slices.Clone(opts.Env), crashpoint.EnvVar+"="+at), bin: opts.Bin}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	d.MetadataAddr = fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"serve", "--data-dir", d.DataDir, "--socket", d.Socket, "--metadata-listen", d.MetadataAddr}
	if d.store != "" {
		args = append(args, "--store", d.store)
	}
	cmd := newCmd(d.bin, append(args, d.args...), d.env)
	p, err := testenv.StartProcess(t, "hostctl serve (crashing at "+at+")", cmd)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(bound):
		p.Stop()
		return false, p.Output()
	}
	killed := p.Err() != nil && strings.Contains(p.Err().Error(), "signal: killed")
	return killed, p.Output()
}

// keyReports returns `hostctl keys status CLASS --output json`.
func keyReports(t *testing.T, d *daemon, class keyrotation.Class) []types.KeyReport {
	t.Helper()
	var rs []types.KeyReport
	decodeJSON(t, d.MustCtl("keys", "status", string(class), "--output", "json").stdout, &rs)
	return rs
}

// waitRotated waits until every subject of class has reached gen with
// nothing pending (or one failed: then it returns the failure).
func waitRotated(t *testing.T, d *daemon, class keyrotation.Class, gen int64) error {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		rs := keyReports(t, d, class)
		done := len(rs) > 0
		for _, r := range rs {
			if r.Status.KeyGeneration < gen || !r.Complete {
				done = false
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not at generation %d after 3 minutes: %+v", class, gen, rs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// crashScenario is one procedure's part of the matrix.
type crashScenario struct {
	class keyrotation.Class
	// procedure is the crashpoint procedure name.
	procedure string
	// steps are the steps this matrix kills hostctl at; every declared
	// step when nil.
	steps []string
	// args are hostctl serve flags every run gets; policy the
	// --key-rotation flag that asks for generation gen.
	args   func(t *testing.T, dir string) []string
	policy string
	gen    int64
	// setup runs on a daemon before the rotation and returns what verify
	// checks.
	setup func(t *testing.T, d *daemon) any
	// online checks a running daemon after recovery; offline the data
	// directory and store once it is stopped. Each returns what was lost.
	online  func(t *testing.T, d *daemon, state any) []string
	offline func(t *testing.T, dataDir, storeURL string, state any) []string
}

type crashRow struct {
	procedure, step, store, outcome string
}

// runCrashMatrix runs every step of sc on bolt, and its first step on
// Redis: the unit tier kills the procedures themselves at every step on
// both stores (internal/keys, hostctl/metadatakeys and the controller's
// disk rotation crash matrices); here hostctl serve must recover from
// each step, and on Redis once per procedure. The rows run in parallel
// (each has its own data directory, Redis and daemon); the returned rows
// are filled in when they end (read them in a t.Cleanup).
func runCrashMatrix(t *testing.T, sc crashScenario) []*crashRow {
	bin := crashHostctl(t)
	steps := crashpoint.Steps(sc.procedure)
	if len(steps) == 0 {
		t.Fatalf("procedure %s declares no steps (declared: %v)", sc.procedure, crashpoint.Procedures())
	}
	if sc.steps != nil {
		for _, s := range sc.steps {
			if !slices.Contains(steps, s) {
				t.Fatalf("procedure %s declares no step %q (declared: %v)", sc.procedure, s, steps)
			}
		}
		steps = sc.steps
	}
	var rows []*crashRow
	for _, backend := range []string{"bolt", "redis"} {
		for i, step := range steps {
			if backend == "redis" && i > 0 {
				break
			}
			name := sc.procedure + "/" + backend + "/" + step
			row := &crashRow{procedure: sc.procedure, step: step, store: backend}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				var storeURL string
				if backend == "redis" {
					storeURL = testenv.StartRedis(t)
				}
				args := append([]string{"--host", "crash-host"}, sc.args(t, dir)...)
				opts := daemonOptions{DataDir: filepath.Join(dir, "data"), Store: storeURL, Args: args, Bin: bin}
				d := startDaemon(t, opts)
				state := sc.setup(t, d)
				d.Stop()

				withPolicy := opts
				withPolicy.Args = append(slices.Clone(args), "--key-rotation", sc.policy)
				killed, out := runUntilKilled(t, withPolicy, crashpoint.Name(sc.procedure, step), 3*time.Minute)
				if !killed {
					row.outcome = "not reached"
					t.Errorf("hostctl was not killed at %s:\n%s", step, out)
					return
				}
				d2 := startDaemon(t, withPolicy)
				var lost []string
				if err := waitRotated(t, d2, sc.class, sc.gen); err != nil {
					lost = append(lost, err.Error())
				}
				lost = append(lost, sc.online(t, d2, state)...)
				d2.Stop()
				lost = append(lost, sc.offline(t, opts.DataDir, storeURL, state)...)
				row.outcome = "recovered"
				if len(lost) > 0 {
					row.outcome = "LOST"
					t.Errorf("after a crash at %s: %s\nhostctl logged:\n%s", step, strings.Join(lost, "; "), d2.Log())
				}
			})
			rows = append(rows, row)
		}
	}
	return rows
}

func printCrashMatrix(t *testing.T, rows []*crashRow) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCEDURE\tSTEP\tSTORE\tOUTCOME")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.procedure, r.step, r.store, r.outcome)
	}
	tw.Flush()
	t.Logf("key rotation crash matrix:\n%s", b.String())
}

// openKeys opens the key manager of a stopped daemon's data directory.
func openKeys(t *testing.T, dataDir, storeURL string) (*keys.Manager, store.Store) {
	t.Helper()
	u := storeURL
	if u == "" {
		u = "bolt://" + storeurl.EmbeddedPath(dataDir)
	}
	st, err := storeurl.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	km, err := keys.Open(context.Background(), st, dataDir, keys.Options{Host: "crash-host"})
	if err != nil {
		t.Fatalf("key manager after recovery: %v", err)
	}
	return km, st
}

func newCmd(bin string, args, env []string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = testenv.ChildEnv(nil, env...)
	return cmd
}

// kekScenario: secrets made through the API must unwrap to their values
// after the key-encryption key's rotation, and only the new generation
// may remain in the key file.
func kekScenario() crashScenario {
	type secret struct{ uuid, value string }
	return crashScenario{
		class:     keyrotation.KEK,
		procedure: "kek-rotate",
		policy:    "kek=KeyGeneration,generation=2",
		gen:       2,
		args:      func(*testing.T, string) []string { return nil },
		setup: func(t *testing.T, d *daemon) any {
			var out []secret
			for i := range 3 {
				value := fmt.Sprintf("crash-matrix-passphrase-%d-%s", i, strings.Repeat("k", 16))
				pf := filepath.Join(t.TempDir(), "pass")
				if err := os.WriteFile(pf, []byte(value), 0o600); err != nil {
					t.Fatal(err)
				}
				var s types.Secret
				decodeJSON(t, d.MustCtl("secret", "create", "--project", "demo", "--payload-file", pf, "--output", "json").stdout, &s)
				out = append(out, secret{s.UUID, value})
			}
			return out
		},
		online: func(t *testing.T, d *daemon, state any) []string {
			var lost []string
			for _, s := range state.([]secret) {
				if r := d.Ctl("secret", "show", s.uuid); r.code != 0 {
					lost = append(lost, "secret "+s.uuid+" not shown: "+r.stderr)
				}
			}
			return lost
		},
		offline: func(t *testing.T, dataDir, storeURL string, state any) []string {
			km, _ := openKeys(t, dataDir, storeURL)
			var lost []string
			for _, s := range state.([]secret) {
				p, err := km.Passphrase(context.Background(), s.uuid)
				if err != nil || string(p) != s.value {
					lost = append(lost, fmt.Sprintf("secret %s: %v (value kept: %v)", s.uuid, err, err == nil && string(p) == s.value))
				}
			}
			if g := km.KEK().Generations; !slices.Equal(g, []int64{2}) {
				lost = append(lost, fmt.Sprintf("key file generations %v, want [2]", g))
			}
			return lost
		},
	}
}

// metadataInstance is the instance the token and proxy scenarios read
// metadata as.
const (
	crashInstanceUUID = "6c3e2b4a-1d2f-4e5a-9b8c-7d6e5f4a3b2c"
	crashInstanceAddr = "127.77.0.9"
	crashProxyAddr    = "127.98.0.1"
	crashTenant       = "crash-project"
	crashProxySecret  = "crash-matrix-proxy-secret-0"
)

func applyCrashInstance(t *testing.T, d *daemon) {
	d.Apply(fmt.Sprintf("name: crash-vm\nuuid: %s\nproject_id: %s\naddresses: [%s]\n", crashInstanceUUID, crashTenant, crashInstanceAddr))
}

// readAsProxy reads the instance's meta_data.json through the trusted
// proxy, signing with secret; it returns what is wrong ("" when read).
func readAsProxy(d *daemon, secret string) string {
	r, err := rawGet(crashProxyAddr, d.MetadataAddr, "/openstack/latest/meta_data.json",
		"X-Instance-ID: "+crashInstanceUUID, "X-Tenant-ID: "+crashTenant, "X-Instance-ID-Signature: "+novaSignature(secret, crashInstanceUUID))
	if err != nil || r.status != 200 || !strings.Contains(string(r.body), crashInstanceUUID) {
		return fmt.Sprintf("proxy read signed with a valid secret: %v status %d body %.80q", err, r.status, r.body)
	}
	return ""
}

// readWithToken reads as the instance with a session token.
func readWithToken(d *daemon, token string) string {
	r, err := rawGet(crashInstanceAddr, d.MetadataAddr, "/latest/meta-data/instance-id", "X-aws-ec2-metadata-token: "+token)
	if err != nil || r.status != 200 {
		return fmt.Sprintf("read with a token: %v status %d body %.80q", err, r.status, r.body)
	}
	return ""
}

func newToken(t *testing.T, d *daemon) string {
	t.Helper()
	r, err := rawPut(crashInstanceAddr, d.MetadataAddr, "/latest/api/token", "X-aws-ec2-metadata-token-ttl-seconds: 3600")
	if err != nil || r.status != 200 || len(r.body) == 0 {
		t.Fatalf("PUT /latest/api/token: %v status %d body %q", err, r.status, r.body)
	}
	return string(r.body)
}

// metadataArgs: the token policy, a trusted proxy network with a secret
// file, key files checked often (the rotations' second phase waits for
// the readers).
func metadataArgs(tokens string) func(t *testing.T, dir string) []string {
	return func(t *testing.T, dir string) []string {
		return metadataArgsWith(t, dir, tokens)
	}
}

func metadataArgsWith(t *testing.T, dir, tokens string) []string {
	secretFile := filepath.Join(dir, "proxy.secret")
	if err := os.WriteFile(secretFile, []byte(crashProxySecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--metadata-token-policy", tokens, "--metadata-trusted-proxies", "127.98.0.0/16",
		"--metadata-proxy-secret-file", secretFile, "--metadata-key-check-interval", "200ms"}
}

// tokenScenario: a token taken before the rotation keeps working after
// the crash and the recovery, and so does a new one.
func tokenScenario() crashScenario {
	return crashScenario{
		class:     keyrotation.Token,
		procedure: "token-rotate",
		policy:    "token=KeyGeneration,generation=2", // created by this hostctl: generation 1
		gen:       2,
		args:      metadataArgs("required"),
		setup: func(t *testing.T, d *daemon) any {
			applyCrashInstance(t, d)
			tok := newToken(t, d)
			if bad := readWithToken(d, tok); bad != "" {
				t.Fatal(bad)
			}
			return tok
		},
		online: func(t *testing.T, d *daemon, state any) []string {
			var lost []string
			for _, tok := range []string{state.(string), newToken(t, d)} {
				if bad := readWithToken(d, tok); bad != "" {
					lost = append(lost, bad)
				}
			}
			return lost
		},
		offline: func(*testing.T, string, string, any) []string { return nil },
	}
}

// proxyScenario: the proxies' old secret (kept as a prior) and the new
// current one both read metadata after the crash and the recovery.
func proxyScenario() crashScenario {
	return crashScenario{
		class:     keyrotation.Proxy,
		procedure: "proxy-rotate",
		policy:    "proxy=KeyGeneration,generation=1,keep-prior=1",
		gen:       1,
		args:      metadataArgs("optional"),
		setup: func(t *testing.T, d *daemon) any {
			applyCrashInstance(t, d)
			if bad := readAsProxy(d, crashProxySecret); bad != "" {
				t.Fatal(bad)
			}
			return nil
		},
		online: func(t *testing.T, d *daemon, _ any) []string {
			var lost []string
			var rev types.KeyReveal
			decodeJSON(t, d.MustCtl("keys", "show", "proxy", "--reveal", "--output", "json").stdout, &rev)
			if rev.Secret == crashProxySecret || rev.Secret == "" {
				lost = append(lost, "the current proxy secret is still the old one")
			}
			for _, sec := range []string{crashProxySecret, rev.Secret} {
				if bad := readAsProxy(d, sec); bad != "" {
					lost = append(lost, bad)
				}
			}
			rs := keyReports(t, d, keyrotation.Proxy)
			if len(rs) != 1 || rs[0].Status.PriorKeyCount == nil || *rs[0].Status.PriorKeyCount != 1 {
				lost = append(lost, fmt.Sprintf("proxy status %+v, want 1 prior secret", rs))
			}
			return lost
		},
		offline: func(*testing.T, string, string, any) []string { return nil },
	}
}

// diskScenario: a stopped instance with two LUKS disks; after the crash
// and the recovery each disk opens with the passphrase the key manager
// holds (and the old one no longer), and the instance starts (QEMU opens
// its disks with the libvirt secrets set from the key manager).
func diskScenario(uri string) crashScenario {
	type disk struct{ name, secret string }
	type state struct {
		name, uuid string
		disks      []disk
	}
	return crashScenario{
		class:     keyrotation.Disk,
		procedure: diskrotate.Proc,
		// A crash before the new slot is promoted (rolled back) and one
		// after libvirt has the new passphrase (rolled forward). The
		// diskrotate package's TestDiskRotateCrashMatrix stops the
		// rotation at every step (over fakes), its TestDiskRotateCrashQemu
		// kills it with real qemu-img LUKS disks and libvirt secrets on
		// both stores; each row here (a daemon with a libvirt instance of
		// two LUKS disks) takes over a minute.
		steps:  []string{"slot-added", "libvirt-updated"},
		policy: "disk=KeyGeneration,generation=2", // made by this hostctl: generation 1
		gen:    2,
		args: func(*testing.T, string) []string {
			return []string{"--virt", "libvirt", "--libvirt-uri", uri, "--domain-type", "qemu", "--domain-memory", "128",
				"--reconcile-interval", "0", "--luks-iter-time", "50ms"}
		},
		setup: func(t *testing.T, d *daemon) any {
			name := testenv.UniqueDomainName(t)
			testenv.CleanupDomain(t, uri, name)
			d.Apply("name: " + name + "\ndisks: [{name: vda, size: 8M, encrypted: true}, {name: vdb, size: 8M, encrypted: true}]\n")
			d.MustCtl("instance", "stop", name, "--timeout", "1ms")
			var inst types.Instance
			decodeJSON(t, d.MustCtl("instance", "show", name, "--output", "json").stdout, &inst)
			st := state{name: name, uuid: inst.Spec.UUID}
			for _, bd := range inst.BlockDevices {
				if bd.Encrypted {
					st.disks = append(st.disks, disk{name: bd.Disk, secret: bd.EncryptionSecretUUID})
				}
			}
			if len(st.disks) != 2 {
				t.Fatalf("instance %s: encrypted block devices %+v, want 2", name, inst.BlockDevices)
			}
			return &st
		},
		online: func(t *testing.T, d *daemon, s any) []string {
			st := s.(*state)
			if r := d.Ctl("instance", "start", st.name); r.code != 0 {
				return []string{"the instance does not start after the rotation: " + r.stderr}
			}
			d.MustCtl("instance", "stop", st.name, "--timeout", "1ms") // no guest OS to shut down: power off
			return nil
		},
		offline: func(t *testing.T, dataDir, storeURL string, s any) []string {
			st := s.(*state)
			km, _ := openKeys(t, dataDir, storeURL)
			tool := encryption.New(encryption.Options{})
			var lost []string
			for _, dk := range st.disks {
				path := filepath.Join(dataDir, "instances", st.name, "disk-"+dk.name+".qcow2")
				pass, err := km.Passphrase(context.Background(), dk.secret)
				if err != nil {
					lost = append(lost, fmt.Sprintf("disk %s: secret %s: %v", dk.name, dk.secret, err))
					continue
				}
				if err := tool.Verify(context.Background(), path, pass, nil); err != nil {
					lost = append(lost, fmt.Sprintf("disk %s does not open with the key manager's passphrase: %v", dk.name, err))
				}
				if has, err := km.HasPending(context.Background(), dk.secret); err != nil || has {
					lost = append(lost, fmt.Sprintf("disk %s: a pending passphrase is left (%v)", dk.name, err))
				}
			}
			return lost
		},
	}
}

// TestKeyRotationCrashMatrix kills hostctl serve at every step of every
// key rotation procedure (on bolt; on Redis at the first), and checks that it recovers
// with nothing lost.
func TestKeyRotationCrashMatrix(t *testing.T) {
	t.Parallel()
	var rows []*crashRow
	// After the parallel rows have ended.
	t.Cleanup(func() { printCrashMatrix(t, rows) })
	for _, sc := range []crashScenario{kekScenario(), tokenScenario(), proxyScenario()} {
		rows = append(rows, runCrashMatrix(t, sc)...)
	}
}

// TestDiskKeyRotationCrashMatrix is the crash matrix of the disk
// passphrase rotation (real libvirtd, QEMU, qemu-img LUKS disks), at two
// of its steps (diskScenario says why).
func TestDiskKeyRotationCrashMatrix(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	requireVirtServe(t)
	rows := runCrashMatrix(t, diskScenario(uri))
	t.Cleanup(func() { printCrashMatrix(t, rows) })
}
