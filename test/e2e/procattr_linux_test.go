package e2e

import "syscall"

// procAttr makes the kernel kill a started daemon when the test binary dies
// without running its cleanups (a timeout panic, a kill).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
