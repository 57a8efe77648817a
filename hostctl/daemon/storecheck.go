package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
)

// dataDirMode is the data directory's mode: it holds the key-encryption
// key, the embedded store and the instances' disks and config drives.
const dataDirMode = 0o700

// instancesDir is the per-instance directory under the data directory
// (hostctl/controller); baseDir under it holds image templates, not
// instances.
const (
	instancesDir = "instances"
	baseDir      = "_base"
	// stagedSuffix marks a config drive being built (controller: the
	// drive is built as disk.config.staged, then swapped in); one left
	// behind was cut short by a crash.
	stagedDrive = "disk.config.staged"
)

// ErrStoreLost is returned (wrapped) when the data directory shows that
// this host had a store, but the store holds nothing of it.
var ErrStoreLost = errors.New("the store is empty but the data directory says it was used")

// priorUse is what a data directory shows of earlier starts: the files a
// daemon leaves once it has run.
type priorUse struct {
	found []string
}

// prepareDataDir runs under the data directory's lock, before anything
// else reads the directory: it tightens the directory's mode to 0700
// (warning when it was looser: group or others could read the key file's
// directory), removes config drives a killed daemon left half-built, and
// notes what shows that a store was used here.
func prepareDataDir(dir string, log *slog.Logger) (priorUse, error) {
	var p priorUse
	fi, err := os.Stat(dir)
	if err != nil {
		return p, fmt.Errorf("data directory: %w", err)
	}
	if mode := fi.Mode().Perm(); mode&0o077 != 0 {
		if err := os.Chmod(dir, dataDirMode); err != nil {
			return p, fmt.Errorf("data directory %s has mode %04o (group or others may enter it) and could not be tightened to %04o: %w", dir, mode, dataDirMode, err)
		}
		log.Warn("data directory was open to group or others: tightened", "dir", dir, "was", fmt.Sprintf("%04o", mode), "now", fmt.Sprintf("%04o", dataDirMode))
	}
	for _, name := range []string{keys.KEKFile, hosts.NameFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			p.found = append(p.found, "the file "+filepath.Join(dir, name))
		}
	}
	ents, err := os.ReadDir(filepath.Join(dir, instancesDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return p, fmt.Errorf("data directory: %w", err)
	}
	var insts []string
	for _, e := range ents {
		if !e.IsDir() || e.Name() == baseDir {
			continue
		}
		insts = append(insts, e.Name())
		staged := filepath.Join(dir, instancesDir, e.Name(), stagedDrive)
		if err := os.Remove(staged); err == nil {
			log.Info("removed a config drive left half-built by an interrupted apply", "file", staged)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return p, fmt.Errorf("remove leftover %s: %w", staged, err)
		}
	}
	if len(insts) > 0 {
		shown := insts
		if len(shown) > 5 {
			shown = append(shown[:5:5], "…")
		}
		p.found = append(p.found, fmt.Sprintf("%d instance directories in %s (%s)", len(insts), filepath.Join(dir, instancesDir), strings.Join(shown, ", ")))
	}
	return p, nil
}

// storeTrace is what checkStoreNotLost reads.
type storeTrace interface {
	Record(ctx context.Context, key string) (store.Record, error)
	Instances(ctx context.Context) ([]store.Instance, error)
}

// checkStoreNotLost refuses to start when the data directory shows an
// earlier use (prior) but the store holds no trace of this host: no
// heartbeat, no key-encryption key check record, no instance. That is a
// store file deleted or emptied, or a Redis that came back without its
// data; starting would serve every guest a 404 and orphan every secret.
// --init-empty-store starts anyway.
func checkStoreNotLost(ctx context.Context, st storeTrace, host string, prior priorUse, cfg Config) error {
	if len(prior.found) == 0 {
		return nil
	}
	for _, key := range []string{hosts.Key(host), keys.CheckRecordKey(host)} {
		_, err := st.Record(ctx, key)
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("check the store: %w", err)
		}
	}
	insts, err := st.Instances(ctx)
	if err != nil {
		return fmt.Errorf("check the store: %w", err)
	}
	for _, in := range insts {
		if in.Host == host || in.Host == "" {
			return nil
		}
	}
	if cfg.InitEmptyStore {
		return nil
	}
	return fmt.Errorf("%w: store %s holds nothing of host %s (no heartbeat, no key check record, no instance), but the data directory has %s. "+
		"The store was probably deleted, emptied or replaced: restore it from a backup (see docs/operators.md, \"Backup and restore\"). "+
		"If you mean to start this host on a new, empty store, start once with --init-empty-store",
		ErrStoreLost, storeName(cfg.Store, cfg.DataDir), host, strings.Join(prior.found, " and "))
}
