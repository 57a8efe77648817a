package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrCorrupt is returned (wrapped) by Open when the file is not a sound
// bbolt database: bad meta pages, or pages that bbolt's consistency check
// (or a read) finds broken. bbolt answers such pages with a panic; Open
// turns every one into this error, so a daemon refuses to start with a
// message instead of crash-looping.
var ErrCorrupt = errors.New("the store file is corrupt")

// restoreHint is the end of a corruption message.
const restoreHint = "restore it from a backup: stop every process using it, move the corrupt file aside, copy the backup in its place (see \"Backup and restore\" in docs/operators.md); nothing repairs it in place"

// maxReported bounds the problems a corruption message lists.
const maxReported = 3

// panicError is a panic of bbolt on a broken page, as an error.
func panicError(path string, r any) error {
	return fmt.Errorf("%w: %s: %v; %s", ErrCorrupt, path, r, restoreHint)
}

// openDB is bbolt.Open that turns a panic, or an error about the file's
// content (not a lock timeout, not an error of the file system), into
// ErrCorrupt.
func openDB(path string, timeout time.Duration) (db *bbolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, panicError(path, r)
		}
	}()
	db, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: timeout})
	var pe *fs.PathError
	if err != nil && !errors.Is(err, berrors.ErrTimeout) && !errors.As(err, &pe) {
		return nil, fmt.Errorf("%w: %s: %w; %s", ErrCorrupt, path, err, restoreHint)
	}
	return db, err
}

// checkDB runs bbolt's consistency check over every page.
func checkDB(db *bbolt.DB, path string) error {
	var problems []string
	n := 0
	err := view(db, path, func(tx *bbolt.Tx) error {
		// Drain the channel whole: the check's goroutine sends every
		// problem.
		for err := range tx.Check() {
			n++
			if len(problems) < maxReported {
				problems = append(problems, err.Error())
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	more := ""
	if n > len(problems) {
		more = fmt.Sprintf(" (and %d more)", n-len(problems))
	}
	return fmt.Errorf("%w: %s: the consistency check found %d problems: %s%s; %s", ErrCorrupt, path, n, strings.Join(problems, "; "), more, restoreHint)
}

// view and update are db.View and db.Update with a panic of bbolt turned
// into ErrCorrupt (the transaction is rolled back by bbolt's own deferred
// rollback).
func view(db *bbolt.DB, path string, fn func(*bbolt.Tx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(path, r)
		}
	}()
	return db.View(fn)
}

func update(db *bbolt.DB, path string, fn func(*bbolt.Tx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(path, r)
		}
	}()
	return db.Update(fn)
}
