package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestStartComponentsStopsInReverse: components start in order; when
// component N fails, N-1 … 1 are stopped in reverse and N's error is
// returned; a full start is stopped in reverse, a stop's failure not
// keeping the ones before it from stopping.
func TestStartComponentsStopsInReverse(t *testing.T) {
	var log testenv.SyncBuffer
	for _, tc := range []struct {
		name   string
		failAt int // -1: none
		want   []string
	}{
		{"the first fails", 0, []string{"start a"}},
		{"the third fails", 2, []string{"start a", "start b", "start c", "stop b", "stop a"}},
		{"all start, then stop", -1, []string{"start a", "start b", "start c", "start d", "stop d", "stop c", "stop b", "stop a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			failure := errors.New("component failed")
			var cs []component
			for i, name := range []string{"a", "b", "c", "d"} {
				c := component{name: name, start: func(context.Context) error {
					got = append(got, "start "+name)
					if i == tc.failAt {
						return failure
					}
					return nil
				}}
				if name != "c" || tc.failAt < 0 { // c has no stop unless all start
					c.stop = func(ctx context.Context) error {
						if _, ok := ctx.Deadline(); !ok {
							t.Errorf("stop %s: no deadline", name)
						}
						got = append(got, "stop "+name)
						if name == "c" {
							return errors.New("c would not stop")
						}
						return nil
					}
				}
				cs = append(cs, c)
			}
			ctx, cancel := context.WithCancel(context.Background())
			stopAll, err := startComponents(ctx, slog.New(slog.NewTextHandler(&log, nil)), cs)
			if tc.failAt >= 0 {
				if !errors.Is(err, failure) || stopAll != nil {
					t.Fatalf("start: %v, want the failure of component %d", err, tc.failAt+1)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				cancel() // a shutdown: the stops still get their time
				stopAll()
			}
			cancel()
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
	if !strings.Contains(log.String(), "c would not stop") {
		t.Errorf("a failed stop not logged:\n%s", log.String())
	}
}

// TestRunBadConfigChangesNothing: every bad flag, file and combination
// is refused before the daemon acts, with an ErrConfig naming the flag:
// a data directory that does not exist is not created, one that was used
// is left as it was (its mode, a half-built config drive, no store file,
// no lock file), and no admin socket appears.
func TestRunBadConfigChangesNothing(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, "files", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(dir, "files", "missing")
	tokens := write("tokens.json", fmt.Sprintf(`[{"name":"ops","role":"admin","sha256":"%x"}]`, sha256.Sum256([]byte("t"))))
	garbage := write("garbage.pem", "not a certificate\n")
	badSpec := write("bad.json", `{"name":"Not A Name!"}`)
	emptyKey := write("empty.key", "\n")
	adminTCP := func(c *Config) { c.AdminListen, c.AdminTokensFile = "127.0.0.1:0", tokens }

	for _, tc := range []struct {
		says   string
		change func(*Config)
	}{
		{"--log-level", func(c *Config) { c.LogLevel = "loud" }},
		{"--data-dir", func(c *Config) { c.DataDir = tokens }},
		{"--config-drive-format", func(c *Config) { c.ConfigDriveFormat = "udf" }},
		{"--host", func(c *Config) { c.Host = "Not_A_Host!" }},
		{"--host-down-after", func(c *Config) { c.HostDownAfter = c.HeartbeatInterval }},
		{"--ephemeral-encryption-formats", func(c *Config) { c.EphemeralEncryptionFormats = "rot13" }},
		{"--luks-iter-time", func(c *Config) { c.LUKSIterTime = -time.Second }},
		{"--admin-listen needs --admin-tokens-file", func(c *Config) { c.AdminListen = "127.0.0.1:0" }},
		{"--admin-tokens-file needs --admin-listen", func(c *Config) { c.AdminTokensFile = tokens }},
		{"--admin-tls-cert and --admin-tls-key need --admin-listen", func(c *Config) { c.AdminTLSCert, c.AdminTLSKey = garbage, garbage }},
		{"--admin-tls-cert and --admin-tls-key go together", func(c *Config) { adminTCP(c); c.AdminTLSCert = garbage }},
		{"--admin-tls-cert " + garbage, func(c *Config) { adminTCP(c); c.AdminTLSCert, c.AdminTLSKey = garbage, garbage }},
		{"--admin-tokens-file", func(c *Config) { adminTCP(c); c.AdminTokensFile = missing }},
		{"--admin-listen", func(c *Config) { adminTCP(c); c.AdminListen = "no port" }},
		{"--socket-group", func(c *Config) { c.SocketGroup = "vmeta-no-such-group" }},
		{"--store", func(c *Config) { c.Store = "mysql://db/vmeta" }},
		{"--store-password-file", func(c *Config) { c.StorePasswordFile = missing }},
		{"--metadata-listen", func(c *Config) { c.MetadataListen = "8775" }},
		{"--metadata-metrics-listen", func(c *Config) { c.Metadata.MetricsListen = "localhost:http-metrics" }},
		{"--metadata-token-policy", func(c *Config) { c.Metadata.TokenPolicy = "sometimes" }},
		{"--metadata-trusted-proxies", func(c *Config) { c.Metadata.TrustedProxies = "not-a-network" }},
		{"--metadata-proxy-secret-file", func(c *Config) { c.Metadata.ProxySecretFile = missing }},
		{"--metadata-token-key-file", func(c *Config) { c.Metadata.TokenKeyFile = emptyKey }},
		{"--virt", func(c *Config) { c.Virt.Mode = "xen" }},
		{"--domain-type", func(c *Config) { c.Virt.DomainType = "hyperv" }},
		{"--domain-kernel", func(c *Config) { c.Virt.Initrd = "/boot/initrd" }},
		{"--device-spec", func(c *Config) { c.Devices.SpecFile = missing }},
		{"--cleanup-hook", func(c *Config) { c.Devices.CleanupHook = "  " }},
		{"--key-rotation", func(c *Config) { c.KeyRotation.Policies = []string{"key-encryption-key=Sometimes"} }},
		{"--apply", func(c *Config) { c.Apply = []string{missing} }},
		{"--apply " + badSpec, func(c *Config) { c.Apply = []string{badSpec} }},
	} {
		t.Run(tc.says, func(t *testing.T) {
			for _, used := range []bool{false, true} {
				base := filepath.Join(t.TempDir(), "run")
				cfg := badConfigBase(t, base)
				if used {
					usedDataDir(t, cfg.DataDir)
				}
				before := listing(t, base)
				tc.change(&cfg)
				if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("Validate: %v, want an ErrConfig naming %q", err, tc.says)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := Run(ctx, cfg)
				cancel()
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("Run (data directory used before: %t): %v, want an ErrConfig naming %q", used, err, tc.says)
				}
				if after := listing(t, base); !slices.Equal(before, after) {
					t.Errorf("data directory used before: %t: a refused configuration changed it:\nbefore %q\nafter  %q", used, before, after)
				}
			}
		})
	}
}

// badConfigBase is a good --virt none configuration in base/data, its
// socket in base/sock; base/data does not exist.
func badConfigBase(t *testing.T, base string) Config {
	t.Helper()
	var cfg Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse([]string{"--data-dir", filepath.Join(base, "data"), "--socket", filepath.Join(base, "sock", "hostctl.sock"),
		"--metadata-listen", "127.0.0.1:0", "--virt", "none", "--host", "bad-config-test"}); err != nil {
		t.Fatal(err)
	}
	cfg.Metadata.TokenKeyFile = TokenKeyFilePath(cfg.DataDir)
	cfg.Stdout, cfg.Stderr = &testenv.SyncBuffer{}, &testenv.SyncBuffer{}
	if err := os.MkdirAll(base, 0o700); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// usedDataDir makes dir look like a data directory a daemon ran in, with
// what a start would change: a mode open to others, and a config drive
// left half-built.
func usedDataDir(t *testing.T, dir string) {
	t.Helper()
	inst := filepath.Join(dir, instancesDir, "web-1")
	if err := os.MkdirAll(inst, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		filepath.Join(inst, stagedDrive):   "half an ISO",
		filepath.Join(dir, hosts.NameFile): "bad-config-test\n",
	} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// listing lists every file and directory under root with its mode, size
// and content's hash.
func listing(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %s", p, fi.Mode())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %d %x", len(b), sha256.Sum256(b))
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestServeAdminTLS: the TLS pair the validation loaded is the one the
// TCP admin listener serves.
func TestServeAdminTLS(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hostctl-test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, tokens := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "tokens.json")
	for name, b := range map[string][]byte{
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		tokens:   fmt.Appendf(nil, `[{"name":"ops","role":"admin","sha256":"%x"}]`, sha256.Sum256([]byte("t"))),
	} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := badConfigBase(t, filepath.Join(dir, "run"))
	cfg.AdminListen, cfg.AdminTokensFile, cfg.AdminTLSCert, cfg.AdminTLSKey = "127.0.0.1:0", tokens, certFile, keyFile
	b := RunInBackground(cfg)
	b.StopAtEnd(t)
	re := regexp.MustCompile(`admin_tcp=(\S+) admin_tls=true`)
	var addr string
	b.WaitFor(t, 30*time.Second, "TLS admin listener", func() error {
		m := re.FindStringSubmatch(b.Stderr.String())
		if m == nil {
			return errors.New("no admin_tcp address with admin_tls=true logged")
		}
		addr = m[1]
		return nil
	})
	pool := x509.NewCertPool()
	pool.AddCert(must(x509.ParseCertificate(der)))
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://" + addr + "/v1/instances")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET without a token over TLS: %d, want 401", resp.StatusCode)
	}
	c.CloseIdleConnections()
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
