//go:build unix

package testenv

import "syscall"

// Pause stops the server process with SIGSTOP: its connections stay open
// and go unanswered, as with a hung server or a network that drops
// packets. Resume continues it. Both do nothing when the server is not
// running.
func (r *RedisServer) Pause() { r.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (r *RedisServer) Resume() { r.signal(syscall.SIGCONT) }

func (r *RedisServer) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Errorf("signal redis-server: %v", err)
	}
}
