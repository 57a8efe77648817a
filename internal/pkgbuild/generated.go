package pkgbuild

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/goreleaser/nfpm/v2/files"
)

// generated is a file a packaged binary prints about itself: its manual
// page (hostctl man, vmeta-metadata man, vmeta-agent man) or a shell
// completion script (hostctl completion bash). Printed by the very binary
// the package ships, from the tables its --help reads, it cannot describe
// another build. The binaries are built for the machine that packages
// them (make package builds amd64 on amd64).
type generated struct {
	// Bin is the binary's name in Inputs.Bin; Args what it is run with.
	Bin  string
	Args []string
	// Dst is where the package installs the output.
	Dst string
	// Gzip compresses it (manual pages; gzip -9n, as dh_compress does).
	Gzip bool
}

// manPage is the generated manual page name.section of bin, printed by
// `bin args...`.
func manPage(bin, name, section string, args ...string) generated {
	return generated{Bin: bin, Args: args, Dst: "/usr/share/man/man" + section + "/" + name + "." + section + ".gz", Gzip: true}
}

// generate runs each g's binary and packages what it prints. The
// binaries run with an environment of only SOURCE_DATE_EPOCH (the pages'
// date) and PATH: defaults a flag takes from the environment
// ($VMETA_SOCKET...) are the built-in ones, whoever packages.
func generate(in Inputs, work string, gs ...generated) (files.Contents, error) {
	var c files.Contents
	for i, g := range gs {
		bin := filepath.Join(in.Bin, g.Bin)
		cmd := exec.Command(bin, g.Args...)
		cmd.Env = []string{"SOURCE_DATE_EPOCH=" + strconv.FormatInt(in.MTime.Unix(), 10), "PATH=/usr/bin:/bin"}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s %v (for %s): %w: %s", bin, g.Args, g.Dst, err, stderr.Bytes())
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%s %v (for %s): printed nothing", bin, g.Args, g.Dst)
		}
		p := filepath.Join(work, fmt.Sprintf("generated-%d-%s", i, filepath.Base(g.Dst)))
		if g.Gzip {
			err = writeGz(p, out)
		} else {
			err = os.WriteFile(p, out, 0o644)
		}
		if err != nil {
			return nil, err
		}
		c = append(c, file(p, g.Dst, 0o644, in.MTime))
	}
	return c, nil
}
