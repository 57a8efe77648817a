package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Tinkerbell Hegel, the peer the issue compares against. Its code never
// enters this module: it is built in a throwaway module and the binary is
// cached by version.
const (
	hegelModule  = "github.com/tinkerbell/hegel"
	hegelVersion = "v0.14.2"
)

// hegelBinary returns the path of a Hegel binary: "" for "none" (no Hegel
// target), path when set, else the
// cached build (os.UserCacheDir()/vmeta-bench, i.e. $XDG_CACHE_HOME or
// ~/.cache), building it first when it is not there.
func hegelBinary(ctx context.Context, path, tmp string) (string, error) {
	if path == "none" {
		return "", nil
	}
	if path != "" {
		return path, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("hegel: %w", err)
	}
	dir := filepath.Join(cache, "vmeta-bench")
	bin := filepath.Join(dir, fmt.Sprintf("hegel-%s-%s-%s", hegelVersion, runtime.GOOS, runtime.GOARCH))
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("hegel cache: %w", err)
	}
	mod := filepath.Join(tmp, "hegel-build")
	if err := os.MkdirAll(mod, 0o700); err != nil {
		return "", fmt.Errorf("hegel build: %w", err)
	}
	fmt.Printf("building Hegel %s in a temporary module (once; cached as %s) …\n", hegelVersion, bin)
	start := time.Now()
	staging := bin + ".tmp-" + strconv.Itoa(os.Getpid())
	steps := [][]string{
		{"go", "mod", "init", "tmp"},
		{"go", "get", hegelModule + "@" + hegelVersion},
		{"go", "build", "-o", staging, hegelModule + "/cmd/hegel"},
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, s[0], s[1:]...)
		cmd.Dir = mod
		// GOWORK=off: no go.work of the surroundings may take part;
		// -mod=mod lets the build complete go.sum as the issue prescribes.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Remove(staging)
			return "", fmt.Errorf("hegel build: %s: %w\n%s", s, err, out)
		}
	}
	if err := os.Rename(staging, bin); err != nil {
		os.Remove(staging)
		return "", fmt.Errorf("hegel build: %w", err)
	}
	fmt.Printf("built Hegel in %s\n", time.Since(start).Round(time.Second))
	return bin, nil
}

// hegelFlatfile is Hegel's flatfile backend format
// (internal/backend/flatfile.Instance in v0.14.2): a YAML list of
// instances keyed by metadata.ipv4.public, the caller's source address.
// JSON is YAML, so it is written with encoding/json.
type hegelFlatfile struct {
	Userdata string        `json:"userdata"`
	Metadata hegelMetadata `json:"metadata"`
}

type hegelMetadata struct {
	ID            string   `json:"id"`
	Hostname      string   `json:"hostname"`
	LocalHostname string   `json:"localHostname"`
	Tags          []string `json:"tags"`
	IPv4          struct {
		Local  string `json:"local"`
		Public string `json:"public"`
	} `json:"ipv4"`
	OS struct {
		Slug    string `json:"slug"`
		Distro  string `json:"distro"`
		Version string `json:"version"`
	} `json:"os"`
}

// startHegel starts target (d): Hegel's flatfile backend serving the
// benchmark's instance at 127.0.0.1, with the hostname ours answers (so
// the bodies are the same). No --trusted-proxies: like ours, Hegel then
// identifies the caller by its source address and skips its
// X-Forwarded-For middleware. Hegel logs every request to stdout with no
// way to turn it off; stdout goes to /dev/null (as in the reference
// figures of the style notes), stderr to its log file.
func (e *env) startHegel(ctx context.Context, bin, hostname string) (*target, error) {
	if bin == "" {
		return &target{key: "d", name: "Hegel " + hegelVersion + ", flatfile", skipped: "-hegel none"}, nil
	}
	inst := hegelFlatfile{Userdata: "#cloud-config\npackage_update: true\npackages: [nginx]\nruncmd:\n  - systemctl enable --now nginx\n"}
	md := &inst.Metadata
	md.ID, md.Hostname, md.LocalHostname = benchUUID, hostname, hostname
	md.Tags = []string{"webserver", "frontend"}
	md.IPv4.Local, md.IPv4.Public = "10.1.0.0", benchAddress
	md.OS.Slug, md.OS.Distro, md.OS.Version = "debian_12", "debian", "12"
	file := filepath.Join(e.tmp, "hegel-flatfile.yml")
	if err := writeJSON(file, []hegelFlatfile{inst}); err != nil {
		return nil, fmt.Errorf("hegel flatfile: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := e.procs.start(spawn{name: "hegel", log: filepath.Join(e.tmp, "hegel.log"), bin: bin,
		args: []string{"--backend", "flatfile", "--flatfile-path", file, "--http-addr", addr}, discardStdout: true})
	if err != nil {
		return nil, err
	}
	if err := p.waitDial(ctx, "tcp", addr); err != nil {
		return nil, err
	}
	return &target{key: "d", name: "Hegel " + hegelVersion + ", flatfile", base: "http://" + addr, proc: p,
		paths: []string{pathHostname}, expect: map[string][]byte{pathHostname: []byte(hostname)}}, nil
}
