package daemon

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The daemons this package's tests run must not reach the host's
// libvirtd: `hostctl serve` defaults to --virt auto, which picks libvirt
// wherever its socket exists.
func init() { os.Setenv(VirtEnv, "none") }

func TestVirtConfig(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	missing := filepath.Join(t.TempDir(), "no-sock")
	parse := func(args ...string) VirtConfig {
		t.Helper()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var c VirtConfig
		c.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		args []string
		err  string // "" = connects to nothing, no error
	}{
		{[]string{"--virt", "none"}, ""},
		{[]string{}, ""}, // $VMETA_VIRT=none in this package
		{[]string{"--virt", "auto", "--libvirt-uri", "qemu:///system?socket=" + missing}, ""},
		{[]string{"--virt", "libvirt", "--libvirt-uri", "qemu:///system?socket=" + missing}, "libvirtd at " + missing + " is unreachable"},
		{[]string{"--virt", "xen"}, "--virt"},
		{[]string{"--virt", "none", "--domain-type", "hyperv"}, "--domain-type"},
		{[]string{"--virt", "none", "--config-drive-bus", "ide"}, "--config-drive-bus"},
		{[]string{"--virt", "none", "--domain-initrd", "/x"}, "--domain-kernel"},
		{[]string{"--virt", "none", "--firmware-metadata", "yes"}, `--firmware-metadata "yes": must be auto, on or off`},
		{[]string{"--virt", "none", "--firmware-metadata", "off"}, ""},
	} {
		h, err := parse(tc.args...).check()
		if err == nil {
			err = h.connect(ctx, log)
		}
		switch {
		case tc.err == "" && (err != nil || h.conn != nil):
			t.Errorf("%v: %v (connected %t)", tc.args, err, h != nil && h.conn != nil)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: %v, want an error mentioning %q", tc.args, err, tc.err)
		}
		if h != nil {
			h.close()
		}
	}
	if sock, unix := socketOf("qemu+tcp://host/system"); unix || sock != "" {
		t.Errorf("qemu+tcp: %q %t", sock, unix)
	}
	if sock, unix := socketOf("qemu+unix:///system?socket=/x"); !unix || sock != "/x" {
		t.Errorf("qemu+unix: %q %t", sock, unix)
	}
}

// TestRunConfigErrors: a bad value stops Run before it opens anything,
// with an ErrConfig naming the flag.
func TestRunConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		change func(*Config)
		says   string
	}{
		{func(c *Config) { c.LogLevel = "loud" }, "--log-level"},
		{func(c *Config) { c.ConfigDriveFormat = "udf" }, "--config-drive-format"},
		{func(c *Config) { c.AdminListen = "127.0.0.1:0" }, "--admin-listen needs --admin-tokens-file"},
		{func(c *Config) { c.Virt.Mode = "xen" }, "--virt"},
	} {
		var cfg Config
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		cfg.AddFlags(fs)
		cfg.DataDir, cfg.Socket, cfg.MetadataListen = dir, filepath.Join(dir, "s.sock"), "127.0.0.1:0"
		cfg.Metadata.TokenKeyFile = ""
		tc.change(&cfg)
		err := Run(context.Background(), cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an ErrConfig naming it", tc.says, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "s.sock")); err == nil {
		t.Error("a refused configuration left an admin socket")
	}
}

func TestFirmwareSetting(t *testing.T) {
	for _, tc := range []struct {
		mode, version string
		want          bool
		err           string
	}{
		{"auto", "9.0.0", true, ""},
		{"auto", "6.5.0", true, ""},
		{"auto", "6.4.0", false, ""},
		{"on", "9.0.0", true, ""},
		{"on", "6.4.0", false, "libvirt 6.4.0 has no <sysinfo type='fwcfg'> (it needs 6.5.0 or later)"},
		{"off", "9.0.0", false, ""},
		{"maybe", "9.0.0", false, `--firmware-metadata "maybe": must be auto, on or off`},
	} {
		got, err := firmwareSetting(tc.mode, tc.version)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s with libvirt %s: %t, %v; want %t", tc.mode, tc.version, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrConfig)):
			t.Errorf("%s with libvirt %s: %v; want an ErrConfig containing %q", tc.mode, tc.version, err, tc.err)
		}
	}
}
