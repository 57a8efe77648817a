package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/server"
)

// Validate checks every flag, every file the configuration names and
// every combination of them, as Run does before it acts: it reads the
// files it must (the store's password, the admin tokens, the TLS pair,
// the metadata key files, the device spec, the specs of --apply) and
// writes, creates, opens and connects nothing. Its errors are ErrConfig
// (errors.Is) and name the flag.
func (c *Config) Validate() error {
	chk, err := c.check()
	if err != nil {
		return err
	}
	chk.release()
	return nil
}

// checked is what the validation read and parsed, for the start-up to
// use as it is (the files are not read twice).
type checked struct {
	level         slog.Level
	format        configdrive.Format
	encHost       policy.Host
	storePassword string
	// hv is the hypervisor configuration, not yet connected.
	hv *hypervisor
	// devSpec is the device spec (nil without --device-spec); hook the
	// cleanup hook (nil without --cleanup-hook).
	devSpec *devices.Spec
	hook    *devices.Hook
	// socketGID is --socket-group's gid, -1 without it.
	socketGID int
	policies  []policyFlag
	// tokenAuth is the TCP admin listener's tokens (nil without
	// --admin-listen); tlsCert its certificate (nil: plain HTTP).
	tokenAuth *auth.TokenAuth
	tlsCert   *tls.Certificate
	apply     []applyFile
}

// policyFlag is one --key-rotation value, parsed.
type policyFlag struct {
	flag   string
	class  keyrotation.Class
	policy keyrotation.Policy
}

// applyFile is one --apply spec, read and parsed once.
type applyFile struct {
	file string
	spec []byte
}

// release lets go of what check built and start-up did not take over.
func (k *checked) release() {
	if k.hook != nil {
		k.hook.Stop(context.Background()) // nothing runs yet: returns at once
	}
}

// check validates the configuration (Validate) and returns what it read.
func (c *Config) check() (*checked, error) {
	k := &checked{socketGID: -1}
	steps := []func(*checked) error{
		c.checkBasics,
		c.checkHost,
		c.checkStore,
		c.checkAdmin,
		c.checkMetadata,
		c.checkVirt,
		c.checkDevices,
		c.checkKeyRotation,
		c.checkApply,
	}
	for _, step := range steps {
		if err := step(k); err != nil {
			k.release()
			return nil, err
		}
	}
	return k, nil
}

// checkBasics: the log level, the data directory, the config drives'
// format, the heartbeat, encryption and --luks-iter-time.
func (c *Config) checkBasics(k *checked) error {
	if err := k.level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return configErrorf("--log-level %q: must be debug, info, warn or error", c.LogLevel)
	}
	if c.DataDir == "" {
		return configErrorf("--data-dir: must not be empty")
	}
	if fi, err := os.Stat(c.DataDir); err == nil && !fi.IsDir() {
		return configErrorf("--data-dir %s: not a directory", c.DataDir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return configErrorf("--data-dir: %w", err)
	}
	k.format = configdrive.Format(c.ConfigDriveFormat)
	if k.format != configdrive.ISO9660 && k.format != configdrive.VFAT {
		return configErrorf("--config-drive-format %q: must be iso9660 or vfat", c.ConfigDriveFormat)
	}
	if c.HeartbeatInterval <= 0 || c.HostDownAfter <= c.HeartbeatInterval {
		return configErrorf("--host-down-after (%s) must be longer than --heartbeat-interval (%s), which must be positive", c.HostDownAfter, c.HeartbeatInterval)
	}
	var err error
	if k.encHost, err = c.encryptionHost(); err != nil {
		return err
	}
	if c.LUKSIterTime < 0 {
		return configErrorf("--luks-iter-time %s: must not be negative", c.LUKSIterTime)
	}
	return nil
}

// checkHost checks --host, and that it is the name the data directory
// was started with (read, never written here: the first start writes it
// once the store opened).
func (c *Config) checkHost(*checked) error {
	if c.Host != "" {
		if err := hosts.CheckName(c.Host); err != nil {
			return configErrorf("--host: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, hosts.NameFile)); err == nil {
		// The name file exists: Resolve only reads it.
		if _, err := hosts.Resolve(c.DataDir, c.Host); err != nil {
			return configErrorf("--host: %w", err)
		}
		return nil
	}
	if c.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return configErrorf("--host: the machine's host name: %w (set one with --host)", err)
		}
		if err := hosts.CheckName(strings.ToLower(h)); err != nil {
			return configErrorf("--host: the machine's host name will not do: %w (set one with --host)", err)
		}
	}
	return nil
}

// checkStore checks the store URL's form and reads its password; it
// does not connect.
func (c *Config) checkStore(k *checked) error {
	if !storeurl.IsEmbedded(c.Store) {
		if err := storeurl.Check(c.Store); err != nil {
			return configErrorf("--store: %w", err)
		}
	}
	pw, err := storeurl.Password(c.StorePasswordFile, nil)
	if err != nil {
		return configErrorf("%w", err) // names --store-password-file
	}
	k.storePassword = pw
	return nil
}

// checkAdmin checks the admin socket and the TCP admin listener: the
// socket's group, the listener's tokens and TLS pair, and that they go
// together.
func (c *Config) checkAdmin(k *checked) error {
	if c.Socket == "" {
		return configErrorf("--socket: must not be empty")
	}
	if c.SocketGroup != "" {
		g, err := user.LookupGroup(c.SocketGroup)
		if err != nil {
			return configErrorf("--socket-group %q: %w", c.SocketGroup, err)
		}
		if k.socketGID, err = strconv.Atoi(g.Gid); err != nil {
			return configErrorf("--socket-group %q: gid %q is not a number", c.SocketGroup, g.Gid)
		}
	}
	switch {
	case c.AdminListen == "" && c.AdminTokensFile != "":
		return configErrorf("--admin-tokens-file needs --admin-listen")
	case c.AdminListen == "" && (c.AdminTLSCert != "" || c.AdminTLSKey != ""):
		return configErrorf("--admin-tls-cert and --admin-tls-key need --admin-listen")
	case c.AdminListen != "" && c.AdminTokensFile == "":
		return configErrorf("--admin-listen needs --admin-tokens-file (the TCP admin API always requires tokens)")
	case (c.AdminTLSCert == "") != (c.AdminTLSKey == ""):
		return configErrorf("--admin-tls-cert and --admin-tls-key go together")
	case c.AdminListen == "":
		return nil
	}
	if err := checkListen("--admin-listen", c.AdminListen); err != nil {
		return err
	}
	var err error
	if k.tokenAuth, err = auth.LoadTokens(c.AdminTokensFile); err != nil {
		return configErrorf("--admin-tokens-file: %w", err)
	}
	if c.AdminTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.AdminTLSCert, c.AdminTLSKey)
		if err != nil {
			return configErrorf("--admin-tls-cert %s and --admin-tls-key %s: %w", c.AdminTLSCert, c.AdminTLSKey, err)
		}
		k.tlsCert = &cert
	}
	return nil
}

// checkMetadata checks the metadata service's flags and reads its key
// files: the proxy secret, and the token key when it exists (a missing
// one is created at start-up).
func (c *Config) checkMetadata(*checked) error {
	m := c.Metadata
	if err := checkListen("--metadata-listen", c.MetadataListen); err != nil {
		return err
	}
	if m.MetricsListen != "" {
		if err := checkListen("--metadata-metrics-listen", m.MetricsListen); err != nil {
			return err
		}
	}
	if _, err := server.ParseTokenPolicy(m.TokenPolicy); err != nil {
		return configErrorf("--metadata-token-policy: %w", err)
	}
	if _, err := server.ParsePrefixes(m.TrustedProxies); err != nil {
		return configErrorf("--metadata-trusted-proxies %q: %w", m.TrustedProxies, err)
	}
	if m.ProxySecretFile != "" {
		if err := checkKeyFile(m.ProxySecretFile); err != nil {
			return configErrorf("--metadata-proxy-secret-file: %w", err)
		}
	}
	if m.TokenKeyFile != "" {
		if err := checkKeyFile(m.TokenKeyFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return configErrorf("--metadata-token-key-file: %w", err)
		}
	}
	return nil
}

// checkKeyFile reads and parses a metadata key file.
func checkKeyFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if _, err := server.ParseKeyFile(data); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// checkListen checks a TCP listen address's form (host:port); binding it
// is the start-up's.
func checkListen(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return configErrorf("%s %q: %w", flag, addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return configErrorf("%s %q: %w", flag, addr, err)
	}
	return nil
}

// checkVirt checks the hypervisor flags (connecting is the start-up's).
func (c *Config) checkVirt(k *checked) error {
	var err error
	k.hv, err = c.Virt.check()
	return err
}

// checkDevices reads the device spec and checks the cleanup hook.
func (c *Config) checkDevices(k *checked) error {
	d := c.Devices
	if d.SpecFile != "" {
		var err error
		if k.devSpec, err = devices.LoadSpec(d.SpecFile); err != nil {
			return configErrorf("--device-spec: %w", err)
		}
		if len(k.devSpec.Entries) > 0 {
			if fi, err := os.Stat(d.SysfsRoot); err != nil {
				return configErrorf("--sysfs-root: %w", err)
			} else if !fi.IsDir() {
				return configErrorf("--sysfs-root %s: not a directory", d.SysfsRoot)
			}
		}
	}
	if d.CleanupHook != "" {
		var err error
		if k.hook, err = devices.NewHook(d.CleanupHook, d.CleanupHookTimeout); err != nil {
			return configErrorf("--cleanup-hook: %w", err)
		}
	}
	return nil
}

// checkKeyRotation parses the key rotation policies (storing them, which
// may be refused as lowering a stored generation, is the start-up's).
func (c *Config) checkKeyRotation(k *checked) error {
	for _, f := range c.KeyRotation.Policies {
		cl, p, err := keyrotation.ParseFlag(f)
		if err != nil {
			return configErrorf("--key-rotation %s: %w", f, err)
		}
		k.policies = append(k.policies, policyFlag{flag: f, class: cl, policy: p})
	}
	return nil
}

// checkApply reads and parses the specs of --apply.
func (c *Config) checkApply(k *checked) error {
	for _, f := range c.Apply {
		spec, err := os.ReadFile(f)
		if err != nil {
			return configErrorf("--apply: %w", err)
		}
		if _, err := model.ParseSpec(spec); err != nil {
			return configErrorf("--apply %s: %w", f, err)
		}
		k.apply = append(k.apply, applyFile{file: f, spec: spec})
	}
	return nil
}
