package testenv

// Pid is the process id of a started Process (0 for one that did not
// start), for a test that reads its /proc entries (memory, open files).
func (p *Process) Pid() int {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
