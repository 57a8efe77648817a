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
func Write(path string, perm fs.FileMode, fill func(f *os.File) error) error {
	dir, base := filepath.Split(path)
	if base == "" {
		return fmt.Errorf("write %q: names a directory, not a file", path)
	}
	s, err := Stage(dir, tempPattern(base), perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer s.Abort()
	if err := fill(s.File()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := s.Commit(path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// CreateExclusive writes data to path atomically, but only when path does
// not exist yet: it returns an error wrapping fs.ErrExist, writing
// nothing, when it does (another process won the race). The file appears
// whole, with its mode, or not at all — as a key file must.
func CreateExclusive(path string, data []byte, perm fs.FileMode) error {
	dir, base := filepath.Split(path)
	s, err := Stage(dir, tempPattern(base), perm)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer s.Abort()
	if _, err := s.File().Write(data); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := s.CommitExclusive(path); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}

// Staged is a file being written in a directory under a temporary name,
// to be put in place (Commit, CommitExclusive) once whole, or removed
// (Abort). Write and CreateExclusive are built on it; a caller that must
// look at the content before it chooses the file's name (an imported
// image, named after the format qemu-img finds in it) uses it directly.
type Staged struct {
	f    *os.File
	dir  string
	name string
	// closed: the content is final (fsynced, closed); placed: the
	// temporary name was renamed to the destination (nothing to remove).
	closed, placed bool
}

// Stage creates a temporary file in dir, named by pattern as
// os.CreateTemp names it (a dot name, so that a leftover is recognisable
// and hidden), with mode perm (not filtered by the umask) set before any
// data is written.
func Stage(dir, pattern string, perm fs.FileMode) (*Staged, error) {
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &Staged{f: f, dir: dir, name: f.Name()}, nil
}

// tempPattern is the temporary name of a file written to base.
func tempPattern(base string) string { return "." + base + ".tmp-*" }

// File is the temporary file, to write (and seek) until Finish or a
// commit; it must not be closed by the caller.
func (s *Staged) File() *os.File { return s.f }

// Name is the temporary file's path: what a program that inspects the
// content before the commit reads, after Finish.
func (s *Staged) Name() string { return s.name }

// Finish makes the content final: fsynced and closed. The commits call
// it; a caller calls it first when it reads the file by Name.
func (s *Staged) Finish() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.f.Sync(); err != nil {
		s.f.Close()
		return err
	}
	return s.f.Close()
}

// Commit renames the file to path (in the same directory), replacing
// what is there, and fsyncs the directory.
func (s *Staged) Commit(path string) error {
	if err := s.Finish(); err != nil {
		return err
	}
	if err := os.Rename(s.name, path); err != nil {
		return err
	}
	s.placed = true
	return s.syncDir()
}

// CommitExclusive links the file to path (in the same directory) only
// when path does not exist: an error wrapping fs.ErrExist otherwise,
// path left as it is. It fsyncs the directory; Abort then removes the
// temporary name.
func (s *Staged) CommitExclusive(path string) error {
	if err := s.Finish(); err != nil {
		return err
	}
	// link(2) fails with EEXIST instead of replacing, unlike rename(2).
	if err := os.Link(s.name, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fs.ErrExist // the caller names path
		}
		return err
	}
	return s.syncDir()
}

func (s *Staged) syncDir() error {
	if err := SyncDir(s.dir); err != nil {
		// The new file is in place; only the durability of its name is in
		// doubt. Say so rather than pretend the write failed wholly.
		return fmt.Errorf("in place, but syncing directory %s failed: %w", s.dir, err)
	}
	return nil
}

// Abort closes and removes the temporary file, unless Commit renamed it
// (after CommitExclusive the destination keeps the file). Deferred right
// after Stage, it cleans up whatever happened.
func (s *Staged) Abort() {
	if !s.closed {
		s.closed = true
		_ = s.f.Close()
	}
	if !s.placed {
		_ = os.Remove(s.name)
	}
}

// Rename renames from to to, like os.Rename, and fsyncs the directory of
// to (and of from, when it is another), so that the rename survives a
// crash: the staged config drive is put in place this way.
func Rename(from, to string) error {
	if err := os.Rename(from, to); err != nil {
		return err
	}
	dir := filepath.Dir(to)
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("rename %s to %s: in place, but syncing directory %s failed: %w", from, to, dir, err)
	}
	if from := filepath.Dir(from); from != dir {
		if err := SyncDir(from); err != nil {
			return fmt.Errorf("rename to %s: in place, but syncing directory %s failed: %w", to, from, err)
		}
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
