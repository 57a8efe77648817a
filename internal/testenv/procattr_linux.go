package testenv

import "syscall"

// procAttr makes the kernel kill a started service when the test binary
// dies without running its cleanups (a timeout panic, a kill), so no
// redis-server outlives its test. (The signal follows the OS thread that
// started the child; Go keeps such threads alive unless a goroutine locked
// to one exits, which tests here do not do.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
