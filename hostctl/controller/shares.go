package controller

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

// Shares on libvirt: each spec share is a virtiofs <filesystem> whose
// source is a host directory (virt.Host.ShareDirs, here resolved), which
// libvirt's virtiofsd exports under the share's tag; the domain gets
// shared memory (memfd), which virtiofs needs from boot (virt.BuildDomain
// adds it whenever there is a share). virtiofsd runs as root and gives
// the guest the directory read-write, so a share source must be a
// directory inside the share root (hostctl serve --share-root, default
// DATA-DIR/shares), as disks must be inside the data directory: a spec —
// which a project member may write — cannot export the host's /.
//
// NFS exports (host:/path, the other form Nova's shares take) are not
// supported yet: mount the export on the host, under the share root, and
// give that directory.

// nfsSourceRE matches an NFS export: host:/path or [v6 address]:/path.
var nfsSourceRE = regexp.MustCompile(`^(\[[^\]]*\]|[^/\s\[\]]+):/`)

// shareDirs checks the sources of in's shares and returns the host
// directory of each by share ID, symbolic links resolved, for
// virt.Host.ShareDirs. Every refused source is a field error of one
// *model.SpecError; nothing is changed.
func (c *Controller) shareDirs(in *model.Instance) (map[string]string, error) {
	if len(in.Shares) == 0 {
		return nil, nil
	}
	root, rootErr := resolveDir(c.shareRoot)
	var errs []model.FieldError
	dirs := make(map[string]string, len(in.Shares))
	for i, s := range in.Shares {
		bad := func(format string, args ...any) {
			errs = append(errs, model.FieldError{Field: fmt.Sprintf("shares[%d].source", i), Value: s.Source, Rule: fmt.Sprintf(format, args...)})
		}
		switch {
		case s.Source == "":
			bad("is required with a hypervisor: the host directory (under the share root %s) that virtiofs exports as tag %s", c.shareRoot, s.EffectiveTag())
			continue
		case nfsSourceRE.MatchString(s.Source):
			bad("is an NFS export (host:/path), which is not supported yet: mount it on the host under the share root %s and give that directory", c.shareRoot)
			continue
		case !filepath.IsAbs(s.Source):
			bad("must be an absolute host directory (under the share root %s)", c.shareRoot)
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
			bad("is the share root %s itself; give a directory in it", c.shareRoot)
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
