package pkgbuild

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

func TestPackageVersion(t *testing.T) {
	commit := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		describe, want string
	}{
		{"v1.2.3", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"v1.2.3-dirty", "1.2.3.dirty"},
		{"v1.2.3-4-gabc1234", "1.2.3+git4.abc1234"},
		{"v1.2.3-4-gabc1234-dirty", "1.2.3+git4.abc1234.dirty"},
		{"abc1234", "0.0.0+git20260102030405.abc1234"},
		{"abc1234-dirty", "0.0.0+git20260102030405.abc1234.dirty"},
	}
	for _, tt := range tests {
		t.Run(tt.describe, func(t *testing.T) {
			got, err := PackageVersion(tt.describe, commit)
			if err != nil || got != tt.want {
				t.Errorf("PackageVersion(%q) = %q, %v; want %q", tt.describe, got, err, tt.want)
			}
		})
	}
	for _, bad := range []string{"", "devel", "v1.2", "release-1"} {
		if got, err := PackageVersion(bad, commit); err == nil {
			t.Errorf("PackageVersion(%q) = %q, want an error", bad, got)
		}
	}
}

func TestWrap(t *testing.T) {
	long := strings.Repeat("word ", 40) + "\n.\nsecond paragraph"
	got := wrap(long)
	lines := strings.Split(got, "\n")
	for _, l := range lines {
		if len(l) > 79 {
			t.Errorf("line of %d bytes: %q", len(l), l)
		}
	}
	if !strings.Contains(got, "\n.\nsecond paragraph") || strings.Count(got, "word") != 40 {
		t.Errorf("wrap lost text:\n%s", got)
	}
}

// goEnv answers `go env KEY`.
func goEnv(t *testing.T, key string) string {
	t.Helper()
	b, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", key, err)
	}
	return strings.TrimSpace(string(b))
}

// TestAgentPackagesReproducible builds the real agent, packages it twice as
// .deb and .rpm and expects the same bytes, then looks into the .deb with
// dpkg-deb.
func TestAgentPackagesReproducible(t *testing.T) {
	root := filepath.Dir(goEnv(t, "GOMOD"))
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./guest/cmd/vmeta-agent")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	in := Inputs{Root: root, Bin: bin, Describe: "v1.2.3-4-gabc1234", MTime: time.Unix(1700000000, 0).UTC(),
		Maintainer: "Test <test@example.org>", ModCache: goEnv(t, "GOMODCACHE"), GoRoot: goEnv(t, "GOROOT")}
	for _, format := range []string{"deb", "rpm"} {
		t.Run(format, func(t *testing.T) {
			tgt := Target{Name: "vmeta-agent", Format: format}
			p1, err := Build(in, tgt, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			p2, err := Build(in, tgt, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			b1, _ := os.ReadFile(p1)
			b2, _ := os.ReadFile(p2)
			if len(b1) == 0 || !bytes.Equal(b1, b2) {
				t.Errorf("two builds differ: %s (%d bytes) and %s (%d bytes)", p1, len(b1), p2, len(b2))
			}
			if !strings.Contains(filepath.Base(p1), "1.2.3+git4.abc1234") {
				t.Errorf("file name %s carries no version", p1)
			}
			if format != "deb" {
				return
			}
			dpkgDeb := testenv.LookPath(t, "dpkg-deb")
			out, err := exec.Command(dpkgDeb, "-c", p1).CombinedOutput()
			if err != nil {
				t.Fatalf("dpkg-deb -c: %v\n%s", err, out)
			}
			for _, want := range []string{"./usr/bin/vmeta-agent", "./lib/systemd/system/vmeta-agent.service",
				"./lib/udev/rules.d/99-vmeta-agent.rules", "./etc/cloud/cloud.cfg.d/99-vmeta-agent.cfg",
				"./usr/share/doc/vmeta-agent/copyright", "./usr/share/doc/vmeta-agent/changelog.gz", "./usr/share/man/man8/vmeta-agent.8.gz"} {
				if !strings.Contains(string(out), want+"\n") {
					t.Errorf("package lacks %s:\n%s", want, out)
				}
			}
			lintian(t, p1)
			page := manText(t, extract(t, p1), "usr/share/man/man8/vmeta-agent.8.gz")
			for _, want := range []string{"VMETA-AGENT(8)", "\n   vmeta-agent run\n", "\n       --poll-interval duration\n", "EXIT STATUS"} {
				if !strings.Contains(page, want) {
					t.Errorf("vmeta-agent(8) lacks %q:\n%s", want, page)
				}
			}
			if !strings.Contains(string(out), "2023-11-14 22:13") {
				t.Errorf("file times are not MTime:\n%s", out)
			}
			ctl, err := exec.Command(dpkgDeb, "-f", p1).CombinedOutput()
			if err != nil || !strings.Contains(string(ctl), "Version: 1.2.3+git4.abc1234\n") {
				t.Errorf("control: %v\n%s", err, ctl)
			}
			cp, err := exec.Command(dpkgDeb, "--fsys-tarfile", p1).Output()
			if err != nil {
				t.Fatal(err)
			}
			x := exec.Command("tar", "-xO", "./usr/share/doc/vmeta-agent/copyright")
			x.Stdin = bytes.NewReader(cp)
			copyright, err := x.Output()
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"GNU General Public License version 3", "github.com/pilebones/go-udev", "Go standard library",
				"see /usr/share/common-licenses/GPL-3", "at the commit v1.2.3-4-gabc1234"} {
				if !strings.Contains(string(copyright), want) {
					t.Errorf("copyright lacks %q", want)
				}
			}
		})
	}
}
