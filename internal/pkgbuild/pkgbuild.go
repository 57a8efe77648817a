// Package pkgbuild builds vmeta's installable packages with nfpm (as a
// library, pinned in go.mod): vmeta-agent as .deb and .rpm for guest
// images (the static agent, its systemd unit, udev rule and cloud-init hook
// from guest/dist/), and vmeta-host as .deb for KVM hosts (hostctl and
// vmeta-metadata with their units, defaults and /etc/vmeta/hostctl.yaml
// from hostctl/dist/).
//
// The manual pages (hostctl(1), hostctl.yaml(5), vmeta-metadata(8),
// vmeta-agent(8)) and hostctl's bash and zsh completions are not kept in
// the tree: the packaged binaries print them (hostctl man, hostctl
// completion bash, ...) from the tables their --help reads, when the
// package is built (generated.go). host.go and agent.go each list what
// their package installs; a new file is one line there.
//
// Builds are reproducible: every timestamp is the given MTime (make package
// passes the commit time as SOURCE_DATE_EPOCH), the license files are made
// from the module cache the binaries were built from, and nothing reads
// the clock or the host name. `make package` runs it through
// cmd/pkgbuild; the real-guest test (test/debianvm) builds the agent's
// .deb with it. It is host-side build tooling: nothing in the product
// imports it.
package pkgbuild

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

// Inputs are what a package is made of.
type Inputs struct {
	// Root is the module root (guest/dist, hostctl/dist, LICENSE).
	Root string
	// Bin holds the built binaries: vmeta-agent for the agent package,
	// hostctl and vmeta-metadata for the host package.
	Bin string
	// Describe is `git describe --tags --always --dirty` of the build.
	Describe string
	// MTime is every timestamp in the packages (SOURCE_DATE_EPOCH).
	MTime time.Time
	// Maintainer is the Maintainer/Packager field, "Name <address>".
	Maintainer string
	// ModCache and GoRoot locate the license texts of what the binaries
	// link (go env GOMODCACHE, go env GOROOT).
	ModCache, GoRoot string
}

// Homepage is the project's address in the packages.
const Homepage = "https://github.com/vmeta/vmeta"

// Target is one package to build.
type Target struct {
	Name   string // vmeta-agent or vmeta-host
	Format string // deb or rpm
}

// Targets are the packages `make package` builds.
var Targets = []Target{{"vmeta-agent", "deb"}, {"vmeta-agent", "rpm"}, {"vmeta-host", "deb"}}

// Build writes the package t into outDir and returns its path.
func Build(in Inputs, t Target, outDir string) (string, error) {
	version, err := PackageVersion(in.Describe, in.MTime)
	if err != nil {
		return "", err
	}
	work, err := os.MkdirTemp("", "pkgbuild-")
	if err != nil {
		return "", fmt.Errorf("package %s: %w", t.Name, err)
	}
	defer os.RemoveAll(work)

	var info *nfpm.Info
	switch t.Name {
	case "vmeta-agent":
		info, err = agentInfo(in, t.Format, version, work)
	case "vmeta-host":
		info, err = hostInfo(in, t.Format, version, work)
	default:
		err = fmt.Errorf("unknown package %q", t.Name)
	}
	if err != nil {
		return "", fmt.Errorf("package %s (%s): %w", t.Name, t.Format, err)
	}
	return write(info, t.Format, outDir)
}

// write packages info as format into outDir under the packager's
// conventional file name.
func write(info *nfpm.Info, format, outDir string) (string, error) {
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", fmt.Errorf("package %s (%s): %w", info.Name, format, err)
	}
	pkgr, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	info.Target = filepath.Join(outDir, pkgr.ConventionalFileName(info))
	var buf bytes.Buffer
	if err := pkgr.Package(info, &buf); err != nil {
		return "", fmt.Errorf("package %s (%s): %w", info.Name, format, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	tmp := info.Target + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, info.Target); err != nil {
		return "", fmt.Errorf("write %s: %w", info.Target, err)
	}
	return info.Target, nil
}

var describeRE = regexp.MustCompile(`^v?(\d+\.\d+\.\d+)(?:-(\d+)-g([0-9a-f]+))?(-dirty)?$`)
var hashRE = regexp.MustCompile(`^([0-9a-f]{4,40})(-dirty)?$`)

// PackageVersion turns `git describe --tags --always --dirty` into a
// version both dpkg and rpm order correctly: v1.2.3 is 1.2.3;
// v1.2.3-4-gabc1234 is 1.2.3+git4.abc1234; without a tag, a bare hash is
// 0.0.0+git<commit time>.abc1234 (ordered by commit time); -dirty appends
// .dirty.
func PackageVersion(describe string, commitTime time.Time) (string, error) {
	if m := describeRE.FindStringSubmatch(describe); m != nil {
		v := m[1]
		if m[2] != "" {
			v += "+git" + m[2] + "." + m[3]
		}
		if m[4] != "" {
			v += ".dirty"
		}
		return v, nil
	}
	if m := hashRE.FindStringSubmatch(describe); m != nil {
		v := "0.0.0+git" + commitTime.UTC().Format("20060102150405") + "." + m[1]
		if m[2] != "" {
			v += ".dirty"
		}
		return v, nil
	}
	return "", fmt.Errorf("version %q: want git describe output (v1.2.3, v1.2.3-4-gabc1234 or a commit hash, optionally -dirty)", describe)
}

// common fills the fields every package shares.
func common(in Inputs, name, version, synopsis, long string) *nfpm.Info {
	return &nfpm.Info{
		Name:          name,
		Arch:          "amd64",
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    in.Maintainer,
		Vendor:        "vmeta",
		Homepage:      Homepage,
		Description:   synopsis + "\n" + wrap(long),
		MTime:         in.MTime,
		Overridables: nfpm.Overridables{
			Umask: 0o022,
		},
	}
}

// file is one packaged file.
func file(src, dst string, mode os.FileMode, mtime time.Time) *files.Content {
	return &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: mode, MTime: mtime}}
}

// lintianOverrides ships the package's lintian overrides: Go binaries are
// static by design (CGO_ENABLED=0), which lintian accepts only for
// packages built from a Debian source package that build-depends on
// golang-go.
func lintianOverrides(work, name string, bins []string, mtime time.Time) (*files.Content, error) {
	var b strings.Builder
	b.WriteString("# Go binaries, built with CGO_ENABLED=0: static by design.\n")
	for _, bin := range bins {
		fmt.Fprintf(&b, "%s: statically-linked-binary [%s]\n", name, strings.TrimPrefix(bin, "/"))
	}
	p := filepath.Join(work, name+".lintian-overrides")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	return file(p, "/usr/share/lintian/overrides/"+name, 0o644, mtime), nil
}

func config(src, dst string, mtime time.Time) *files.Content {
	c := file(src, dst, 0o644, mtime)
	c.Type = files.TypeConfigNoReplace
	return c
}

// writeGz writes data gzipped without a name or time in the header
// (reproducible, as lintian wants for changelogs).
func writeGz(path string, data []byte) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// changelog is a one-entry Debian changelog of a native package: the
// version and the commit it was built from.
func changelog(name, version, describe, maintainer string, mtime time.Time) []byte {
	return []byte(fmt.Sprintf("%s (%s) unstable; urgency=medium\n\n  * Built from %s\n    at git describe %s.\n\n -- %s  %s\n",
		name, version, Homepage, describe, maintainer, mtime.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700")))
}

// docFiles adds the changelog (deb) to contents.
func docFiles(work, name, format, version string, in Inputs) (files.Contents, error) {
	if format != "deb" {
		return nil, nil
	}
	p := filepath.Join(work, name+".changelog.gz")
	if err := writeGz(p, changelog(name, version, in.Describe, in.Maintainer, in.MTime)); err != nil {
		return nil, err
	}
	return files.Contents{file(p, "/usr/share/doc/"+name+"/changelog.gz", 0o644, in.MTime)}, nil
}

// systemdDir and udevDir are where units and rules go: Debian 12 keeps
// them under /lib (the usrmerge file moratorium; lintian flags /usr/lib),
// RPM distributions under /usr/lib.
func systemdDir(format string) string {
	if format == "deb" {
		return "/lib/systemd/system"
	}
	return "/usr/lib/systemd/system"
}

func udevDir(format string) string {
	if format == "deb" {
		return "/lib/udev/rules.d"
	}
	return "/usr/lib/udev/rules.d"
}

// wrap fills the paragraphs of text (separated by a line ".") to lines of
// at most 79 bytes, as Debian descriptions and changelogs want.
func wrap(text string) string {
	var out []string
	for _, para := range strings.Split(text, "\n.\n") {
		line := ""
		for _, w := range strings.Fields(para) {
			if line != "" && len(line)+1+len(w) > 79 {
				out = append(out, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		out = append(out, line, ".")
	}
	return strings.Join(out[:len(out)-1], "\n")
}
