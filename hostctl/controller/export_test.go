package controller

import "testing"

// The harness of hypervisor_test.go for the tests of the packages carved
// out of the controller (issue 22): they live in this directory as
// package controller_test, import their package and drive it through
// the real core over the fake hypervisor. Helpers a single package needs
// go in export_<package>_test.go.

// Env is the test harness: a controller over a bolt store in a temporary
// data directory and the fake hypervisor.
type Env = env

// NewEnv makes an Env (see newEnv).
func NewEnv(t *testing.T) *Env { return newEnv(t) }

// Ctl is the harness's controller.
func (e *env) Ctl() *Controller { return e.c }

// Dir is the harness's data directory.
func (e *env) Dir() string { return e.dir }

// Apply applies spec.
func (e *env) Apply(spec string) (*Instance, error) { return e.apply(spec) }

// MustApply applies spec and fails the test on an error.
func (e *env) MustApply(spec string) *Instance {
	e.t.Helper()
	return e.mustApply(spec)
}

// Snapshot lists everything an operation may change (see snapshot).
func (e *env) Snapshot() string {
	e.t.Helper()
	return e.snapshot()
}
