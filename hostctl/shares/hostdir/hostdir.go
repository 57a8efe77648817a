// Package hostdir confines the host directories that virtiofs shares
// export to a share root: virtiofsd runs as root and gives the guest the
// directory read-write, so a share's source must be a directory inside the
// root (hostctl serve --share-root, default DATA-DIR/shares), as disks must
// be inside the data directory — a spec, which a project member may write,
// cannot export the host's /.
package hostdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/vmeta/vmeta/internal/model"
)

// Root is a share root: the directory every share source must be in.
type Root struct {
	// Dir is the share root as configured (symbolic links are resolved
	// at each check).
	Dir string
}

// NFS exports (host:/path, the other form Nova's shares take) are not
// supported yet: mount the export on the host, under the share root, and
// give that directory.

// nfsSourceRE matches an NFS export: host:/path or [v6 address]:/path.
var nfsSourceRE = regexp.MustCompile(`^(\[[^\]]*\]|[^/\s\[\]]+):/`)

// Dirs checks the sources of shares (an instance's, whose field errors
// are named shares[i].source) and returns the host directory of each by
// share ID, symbolic links resolved, for virt.Host.ShareDirs. Every
// refused source is a field error of one *model.SpecError.
func (r Root) Dirs(shares []model.Share) (map[string]string, error) {
	if len(shares) == 0 {
		return nil, nil
	}
	root, rootErr := resolveDir(r.Dir)
	var errs []model.FieldError
	dirs := make(map[string]string, len(shares))
	for i, s := range shares {
		bad := func(format string, args ...any) {
			errs = append(errs, model.FieldError{Field: fmt.Sprintf("shares[%d].source", i), Value: s.Source, Rule: fmt.Sprintf(format, args...)})
		}
		switch {
		case s.Source == "":
			bad("is required with a hypervisor: the host directory (under the share root %s) that virtiofs exports as tag %s", r.Dir, s.EffectiveTag())
			continue
		case nfsSourceRE.MatchString(s.Source):
			bad("is an NFS export (host:/path), which is not supported yet: mount it on the host under the share root %s and give that directory", r.Dir)
			continue
		case !filepath.IsAbs(s.Source):
			bad("must be an absolute host directory (under the share root %s)", r.Dir)
			continue
		case rootErr != nil:
			bad("the share root is not usable: %v (hostctl serve --share-root)", rootErr)
			continue
		}
		dir, err := resolveDir(s.Source)
		if err != nil {
			bad("%v", err)
			continue
		}
		switch {
		case dir == root:
			bad("is the share root %s itself; give a directory in it", r.Dir)
		case !strings.HasPrefix(dir, root+string(filepath.Separator)) && root != string(filepath.Separator):
			if dir != filepath.Clean(s.Source) {
				bad("resolves to %s, outside the share root %s (hostctl serve --share-root)", dir, root)
			} else {
				bad("is outside the share root %s (hostctl serve --share-root)", root)
			}
		default:
			dirs[s.ShareID] = dir
		}
	}
	if len(errs) > 0 {
		return nil, &model.SpecError{Errors: errs}
	}
	return dirs, nil
}

// resolveDir returns the absolute path of the directory p with its
// symbolic links resolved, or why it is not a directory.
func resolveDir(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s does not exist on the host", p)
	}
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", p)
	}
	return real, nil
}
