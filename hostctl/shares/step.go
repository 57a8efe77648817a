package shares

// PauseEnv names a step of attach or detach (lock, apply, inactive,
// detach-apply, unlock, delete-mapping) at which the service stops for
// good, after a log line: test/e2e kills hostctl there (SIGKILL) to check
// that the reconciler converges. Only a binary built with the vmetacrash
// build tag (like internal/crashpoint's crash points) reads it; a
// production build has no such pause (step_off.go).
const PauseEnv = "VMETA_TEST_SHARES_PAUSE_AT"
