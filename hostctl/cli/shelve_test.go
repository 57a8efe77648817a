package cli_test

import (
	"strings"
	"testing"
)

// TestShelveRescueHelp: the shelve and rescue commands say what they do,
// what they require and what they keep, and are listed with the other
// instance commands.
func TestShelveRescueHelp(t *testing.T) {
	checkOutputs(t, []outputCase{
		{[]string{"instance", "shelve", "--help"}, []string{"Usage: hostctl instance shelve NAME", "must be stopped", "shelve does not stop it",
			"NAME-shelved", "same secret UUID", "shelved_offloaded", "refused with 409", "delete deletes the shelved image"}},
		{[]string{"instance", "unshelve", "--help"}, []string{"Usage: hostctl instance unshelve NAME", "same\nsecret UUID and passphrase", "ephemeral disks hold nothing"}},
		{[]string{"instance", "rescue", "--help"}, []string{"Usage: hostctl instance rescue NAME --image IMG", "-image", "-timeout",
			"encrypted if and\nonly if IMG is", "removed at unrescue", "409"}},
		{[]string{"instance", "unrescue", "--help"}, []string{"Usage: hostctl instance unrescue NAME", "original definition"}},
		{[]string{"instance", "--help"}, []string{"hostctl instance shelve", "hostctl instance unshelve", "hostctl instance rescue", "hostctl instance unrescue"}},
	})
}

// TestRescueUsage: a rescue without --image or with a bad --timeout is a
// usage error before any request.
func TestRescueUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--socket", "/nonexistent/sock", "instance", "rescue", "a"}, "--image"},
		{[]string{"--socket", "/nonexistent/sock", "instance", "rescue", "a", "--image", "img", "--timeout", "0s"}, "--timeout"},
		{[]string{"--socket", "/nonexistent/sock", "instance", "shelve"}, "exactly one instance name"},
	} {
		code, _, errOut := hostctl(t, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "nonexistent") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming %s", tc.args, code, errOut, tc.want)
		}
	}
}
