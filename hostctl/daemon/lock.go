package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// LockFile is the file in the data directory a running daemon holds an
// exclusive lock (flock) on, whatever its store: two daemons on one data
// directory would share its key file, config drives and instance files.
// The lock holder writes its pid and start time into the file, for the
// refusal message of the next one.
const LockFile = "hostctl.lock"

// ErrDataDirLocked is returned (wrapped) when another process holds the
// data directory's lock.
var ErrDataDirLocked = errors.New("data directory in use")

// dataDirLock is a held lock on a data directory.
type dataDirLock struct{ f *os.File }

// lockDataDir takes the data directory's lock without waiting, or says
// who holds it. The lock is released by Close, or by the kernel when the
// process ends (kill -9 included).
func lockDataDir(dir string) (*dataDirLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory lock: %w", err)
	}
	if err := flockWait(f); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := strings.TrimSpace(string(holder))
			if who == "" {
				who = "another process"
			}
			return nil, fmt.Errorf("%w: %s is locked by %s: one hostctl serve per data directory, whatever the store (stop the other one, or give this one its own --data-dir)",
				ErrDataDirLocked, path, who)
		}
		return nil, fmt.Errorf("data directory lock %s: %w", path, err)
	}
	host, _ := os.Hostname()
	who := fmt.Sprintf("hostctl pid %d on %s, started %s", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(who+"\n"), 0)
	}
	return &dataDirLock{f: f}, nil
}

// lockWait is how long lockDataDir waits for a lock held by another
// process: a daemon that is stopping, or a child process forked by one
// between its fork and exec (the lock belongs to the open file, which a
// fork shares), lets go within it.
const lockWait = 2 * time.Second

// flockWait takes an exclusive flock on f, retrying for up to lockWait.
func flockWait(f *os.File) error {
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close releases the lock (the file stays: removing it would let a third
// process lock a new file while a second still waits on the old one).
func (l *dataDirLock) Close() error {
	_ = l.f.Truncate(0)
	return l.f.Close()
}
