package e2e

import (
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
)

// TestKeysCLI: hostctl keys status|rotate|policy|show through a daemon:
// a KEK rotation asked with `keys rotate kek --wait` reaches generation 2
// and says it is complete, a lower generation is refused naming both, a
// keep-prior count on a class that has none is refused, and --reveal
// without a proxy secret file says so.
func TestKeysCLI(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	for range 5 {
		d.MustCtl("secret", "create", "--project", "demo")
	}
	st := d.MustCtl("keys", "status")
	for _, want := range []string{"key-encryption-key", "token-signing-key", "COMPLETE", "A rotation is complete when GENERATION >= WANTED"} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("keys status lacks %q:\n%s", want, st.stdout)
		}
	}
	if rs := keyReports(t, d, keyrotation.KEK); len(rs) != 1 || rs[0].Status.KeyGeneration != 1 {
		t.Fatalf("kek before: %+v", rs)
	}
	r := d.MustCtl("keys", "rotate", "kek", "--wait")
	if !strings.Contains(r.stdout, "key-encryption-key") {
		t.Errorf("keys rotate --wait:\n%s", r.stdout)
	}
	rs := keyReports(t, d, keyrotation.KEK)
	if len(rs) != 1 || rs[0].Status.KeyGeneration != 2 || !rs[0].Complete || rs[0].Policy.KeyGeneration != 2 {
		t.Fatalf("kek after rotate --wait: %+v", rs)
	}
	if r := d.Ctl("keys", "policy", "kek", "--policy", "KeyGeneration", "--generation", "1"); r.code == 0 || !strings.Contains(r.stderr, "keyGeneration 1 is below 2") {
		t.Errorf("decrease: %s", r)
	}
	if r := d.Ctl("keys", "policy", "token", "--policy", "KeyGeneration", "--keep-prior", "1"); r.code == 0 || !strings.Contains(r.stderr, "keepPriorKeyCount 1: only for overlapping rotation") {
		t.Errorf("keep-prior on the token key: %s", r)
	}
	if r := d.Ctl("keys", "policy", "proxy", "--policy", "WithVersionUpgrade"); r.code == 0 || !strings.Contains(r.stderr, "not allowed for a key other parties hold") {
		t.Errorf("WithVersionUpgrade on the proxy secret: %s", r)
	}
	if r := d.Ctl("keys", "show", "proxy", "--reveal"); r.code == 0 || !strings.Contains(r.stderr, "no --metadata-proxy-secret-file") {
		t.Errorf("reveal without a proxy secret: %s", r)
	}
	// Every secret still reads (the listing unwraps nothing, show does
	// not either; the crash matrix checks the values).
	if r := d.MustCtl("secret", "list"); strings.Count(r.stdout, "/2\n") != 5 {
		t.Errorf("secrets after the rotation are not all at generation 2:\n%s", r.stdout)
	}
}
