package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/guest"
	"github.com/vmeta/vmeta/guest/internal/fixture"
	"github.com/vmeta/vmeta/internal/metadata"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e, time.Now())
	return code, o.String(), e.String()
}

// TestCommands runs apply, status and find against a fixture guest and a
// config drive image. udevd is "not running" (an empty run directory), so
// apply writes the rules, reports that, and find answers from the state.
func TestCommands(t *testing.T) {
	f := fixture.New(t)
	f.VirtioBlk([]string{"0000:00:07.0"}, 2, "vda", "vol-a")
	dir := t.TempDir()
	drive := filepath.Join(dir, "disk.config")
	md := `{"uuid": "8c3f6a0e-1b2c-4d5e-8f90-123456789abc", "devices": [
	 {"type": "disk", "bus": "pci", "address": "0000:00:07.0", "serial": "vol-a", "tags": ["data"], "encrypted": true}]}`
	if err := configdrive.Build(drive, []metadata.File{{Path: "openstack/latest/meta_data.json", Data: []byte(md)}}, configdrive.Options{}); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.d", "70-vmeta-agent.rules")
	common := []string{"--sysfs", f.Root, "--dev", f.Dev, "--state-dir", filepath.Join(dir, "state"), "--udev-run-dir", filepath.Join(dir, "udev")}
	applyArgs := append(append([]string{"apply"}, common...), "--config-drive", drive, "--rules-file", rules, "--no-altnames", "--share-root", filepath.Join(dir, "shares"))

	if code, _, _ := runCLI(append([]string{"status"}, common...)...); code != 1 {
		t.Errorf("status before any pass: exit %d, want 1", code)
	}
	code, _, stderr := runCLI(applyArgs...)
	if code != 2 || !strings.Contains(stderr, "udevd is not running") {
		t.Fatalf("apply: exit %d, want 2 (udevd not running):\n%s", code, stderr)
	}
	if b, err := os.ReadFile(rules); err != nil || !strings.Contains(string(b), `ENV{VMETA_TAGS}="data", ENV{VMETA_ENCRYPTED}="1"`) {
		t.Errorf("rules: %s %v", b, err)
	}
	code, stdout, _ := runCLI(append([]string{"status"}, common...)...)
	if code != 0 || !strings.Contains(stdout, "source: config drive "+drive) || !strings.Contains(stdout, f.Dev+"/vda") {
		t.Errorf("status: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = runCLI(append([]string{"status", "--output", "json"}, common...)...)
	var st guest.State
	if code != 0 || json.Unmarshal([]byte(stdout), &st) != nil || len(st.Devices) != 1 || !st.Devices[0].Encrypted {
		t.Errorf("status --output json: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = runCLI(append([]string{"find", "--tag", "data", "--type", "disk"}, common...)...)
	if code != 0 || strings.TrimSpace(stdout) != f.Dev+"/vda" {
		t.Errorf("find: exit %d %q", code, stdout)
	}
	if code, _, _ := runCLI(append([]string{"find", "--tag", "nope", "--type", "disk"}, common...)...); code != 3 {
		t.Errorf("find of a missing tag: exit %d, want 3", code)
	}

	// A corrupt drive: exit 1, nothing changed.
	before, _ := os.ReadFile(rules)
	os.WriteFile(drive, bytes.Repeat([]byte{0xff}, 1<<16), 0o644)
	code, _, stderr = runCLI(applyArgs...)
	if code != 1 || !strings.Contains(stderr, "nothing changed") {
		t.Errorf("apply of a corrupt drive: exit %d\n%s", code, stderr)
	}
	if after, _ := os.ReadFile(rules); !bytes.Equal(before, after) {
		t.Error("a corrupt drive changed the rules")
	}
	code, stdout, _ = runCLI(append([]string{"status"}, common...)...)
	if code != 0 || !strings.Contains(stdout, "last error") {
		t.Errorf("status after a failed read: %s", stdout)
	}
}

func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{nil, 1},
		{[]string{"help"}, 0},
		{[]string{"frobnicate"}, 1},
		{[]string{"find"}, 1},
		{[]string{"find", "--tag", "x", "--type", "gpu"}, 1},
		{[]string{"status", "--output", "yaml", "--state-dir", "/nonexistent"}, 1},
		{[]string{"apply", "--source", "floppy"}, 1},
		{[]string{"apply", "--log-level", "loud"}, 1},
	} {
		if code, _, stderr := runCLI(c.args...); code != c.code {
			t.Errorf("%v: exit %d, want %d\n%s", c.args, code, c.code, stderr)
		}
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := runCLI("version")
	if code != 0 || !strings.HasPrefix(stdout, "devel") || !strings.HasSuffix(stdout, "\n") {
		t.Errorf("version: exit %d, output %q; want 0 and a devel version (no -ldflags -X in go test)", code, stdout)
	}
}
