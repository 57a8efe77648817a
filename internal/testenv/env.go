package testenv

import (
	"os"
	"strings"
)

// ChildEnv is the environment for a test's child processes: the test's
// own, without VMETA_SOCKET, the proxy variables and the keys in drop
// (compared case-insensitively), plus extra. Under the race detector it
// adds GORACE=atexit_sleep_ms=0, so that race-built children do not sleep
// a second at every exit.
func ChildEnv(drop []string, extra ...string) []string {
	skip := map[string]bool{"vmeta_socket": true, "http_proxy": true, "https_proxy": true, "all_proxy": true, "no_proxy": true}
	for _, k := range drop {
		skip[strings.ToLower(k)] = true
	}
	var env []string
	gorace := ""
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch lk := strings.ToLower(k); {
		case skip[lk]:
			continue
		case lk == "gorace":
			gorace = v
			continue
		}
		env = append(env, kv)
	}
	if raceEnabled && !strings.Contains(gorace, "atexit_sleep_ms") {
		gorace = strings.TrimSpace(gorace + " atexit_sleep_ms=0")
	}
	if gorace != "" {
		env = append(env, "GORACE="+gorace)
	}
	return append(env, extra...)
}
