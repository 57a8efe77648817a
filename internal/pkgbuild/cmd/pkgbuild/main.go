// Command pkgbuild writes vmeta's packages (vmeta-agent .deb and .rpm,
// vmeta-host .deb) from binaries already built; `make package` runs it.
// See package pkgbuild.
//
//	pkgbuild -bin bin -out bin/dist -describe "$(git describe --tags --always --dirty)"
//
// Timestamps come from $SOURCE_DATE_EPOCH (make package sets the commit
// time), so the same commit gives the same bytes.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vmeta/vmeta/internal/pkgbuild"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pkgbuild:", err)
		os.Exit(1)
	}
}

func run() error {
	var in pkgbuild.Inputs
	var out, only string
	flag.StringVar(&in.Root, "root", ".", "module root")
	flag.StringVar(&in.Bin, "bin", "bin", "directory of the built binaries")
	flag.StringVar(&out, "out", "bin/dist", "output directory")
	flag.StringVar(&in.Describe, "describe", "", "git describe --tags --always --dirty of the build (required)")
	flag.StringVar(&in.Maintainer, "maintainer", envOr("DEBFULLNAME_EMAIL", "vmeta developers <vmeta@users.noreply.github.com>"), "Maintainer field (default $DEBFULLNAME_EMAIL)")
	flag.StringVar(&only, "only", "", "build only NAME.FORMAT (vmeta-agent.deb, vmeta-agent.rpm, vmeta-host.deb)")
	flag.Parse()
	if in.Describe == "" {
		return fmt.Errorf("-describe is required")
	}
	epoch, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	if err != nil {
		return fmt.Errorf("SOURCE_DATE_EPOCH %q: set it to the commit time (git log -1 --format=%%ct): %w", os.Getenv("SOURCE_DATE_EPOCH"), err)
	}
	in.MTime = time.Unix(epoch, 0).UTC()
	if in.ModCache, err = goEnv("GOMODCACHE"); err != nil {
		return err
	}
	if in.GoRoot, err = goEnv("GOROOT"); err != nil {
		return err
	}
	for _, t := range pkgbuild.Targets {
		if only != "" && only != t.Name+"."+t.Format {
			continue
		}
		p, err := pkgbuild.Build(in, t, out)
		if err != nil {
			return err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		fmt.Printf("%s\t%.1f MiB\n", filepath.Clean(p), float64(fi.Size())/(1<<20))
	}
	return nil
}

func goEnv(key string) (string, error) {
	b, err := exec.Command("go", "env", key).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
