// Package atomicfile writes files whole or not at all: the content goes to
// a temporary file in the destination's directory, which gets its mode,
// is fsynced, renamed over the destination, and the directory is fsynced
// so the rename itself survives a crash. A reader (or a crash) sees the
// old file or the new one, never a part.
//
// Config drives, key files, udev rules, the guest agent's state and the
// CLI's output images are written this way; the package has no vmeta
// imports, so the guest agent may use it too.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile writes data to path atomically with mode perm (not filtered by
// the umask), replacing what was there.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// WriteIfChanged is WriteFile unless path already holds exactly data; it
// reports whether it wrote. Rewriting an unchanged file would wake up
// whoever watches it (udev, inotify readers) for nothing.
func WriteIfChanged(path string, data []byte, perm fs.FileMode) (changed bool, err error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm() == perm.Perm() {
			return false, nil
		}
	}
	if err := WriteFile(path, data, perm); err != nil {
		return false, err
	}
	return true, nil
}

// Write calls fill with a new temporary file beside path, then makes it
// path atomically with mode perm. fill may write, seek and write at
// offsets; it must not close the file. When fill or any later step fails,
// the temporary file is removed and path is left as it was.
func Write(path string, perm fs.FileMode, fill func(f *os.File) error) (err error) {
	dir, base := filepath.Split(path)
	if base == "" {
		return fmt.Errorf("write %q: names a directory, not a file", path)
	}
	if dir == "" {
		dir = "."
	}
	f, tmp, err := create(dir, base, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close() // may be closed already; the first error is what matters
			_ = os.Remove(tmp)
		}
	}()
	if err = fill(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = finish(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		// The new file is in place; only the durability of its name is in
		// doubt. Say so rather than pretend the write failed wholly.
		return fmt.Errorf("write %s: in place, but syncing directory %s failed: %w", path, dir, err)
	}
	return nil
}

// CreateExclusive writes data to path atomically, but only when path does
// not exist yet: it returns an error wrapping fs.ErrExist, writing
// nothing, when it does (another process won the race). The file appears
// whole, with its mode, or not at all — as a key file must.
func CreateExclusive(path string, data []byte, perm fs.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, tmp, err := create(dir, base, perm)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(tmp) // after a successful link, path keeps the file
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err = finish(f); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	// link(2) fails with EEXIST instead of replacing, unlike rename(2).
	if err = os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s: %w", path, fs.ErrExist)
		}
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("create %s: in place, but syncing directory %s failed: %w", path, dir, err)
	}
	return nil
}

// SyncDir fsyncs a directory, making the renames and links in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// create opens a new temporary file in dir whose name starts with a dot
// and the destination's base name (so a leftover is recognisable), with
// mode perm set before any data is written.
func create(dir, base string, perm fs.FileMode) (*os.File, string, error) {
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, "", err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, "", err
	}
	return f, f.Name(), nil
}

func finish(f *os.File) error {
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
