package main

import "syscall"

// procAttr puts a server in its own process group (SIGINT on the terminal
// reaches the benchmark, which stops the servers in order) and makes the
// kernel kill it should the benchmark die without cleaning up.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
