package guestvm

import "syscall"

// procAttr makes the kernel kill the daemon when the test binary dies
// without running its cleanups (a timeout panic, a kill).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
