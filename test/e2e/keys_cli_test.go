package e2e

import (
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
)

// TestKeysCLI: hostctl keys status|rotate|policy|show through a daemon:
// every class listed ("no keys yet" where so; the created token key at
// generation 1), a rotation of nothing says so, a KEK rotation asked with `keys rotate kek --wait` reaches generation 2
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
	// Every class is listed with its policy, "no keys yet" where it has
	// none (issue 20 item 11): no proxy secret file, no instance with an
	// encrypted disk (--virt none). The token key this start created is
	// generation 1, minted by this hostctl (item 9).
	t.Logf("hostctl keys status:\n%s", st.stdout)
	rows := map[string][]string{}
	for _, line := range strings.Split(st.stdout, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	for _, class := range []string{"proxy-secret", "disk-passphrases"} {
		if r := rows[class]; len(r) < 3 || r[2] != "Disabled" || !strings.Contains(strings.Join(r, " "), "no keys yet") {
			t.Errorf("keys status: %s row %q, want its policy and no keys yet:\n%s", class, r, st.stdout)
		}
	}
	version := strings.TrimSpace(hostctl(t, nil, "version").stdout)
	if r := rows["token-signing-key"]; len(r) < 6 || r[4] != "1" || r[5] != version {
		t.Errorf("keys status: token-signing-key row %q, want generation 1 minted by this hostctl (%s)", r, version)
	}
	// A rotation with nothing to rotate says so (item 11).
	for _, args := range [][]string{{"keys", "rotate", "disk"}, {"keys", "rotate", "disk", "--wait"}} {
		r := d.MustCtl(args...)
		if !strings.Contains(r.stdout, "disk-passphrases: nothing to rotate") || strings.Contains(r.stdout, "shows when it is complete") {
			t.Errorf("%v with no instance:\n%s", args, r.stdout)
		}
	}
	if rs := keyReports(t, d, keyrotation.Disk); len(rs) != 1 || rs[0].NoKeys == "" || rs[0].Policy.KeyRotationPolicy != types.KeyPolicyDisabled {
		t.Errorf("disk-passphrases after rotating nothing: %+v", rs)
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
	// The other policies ignore the generation (item 8).
	for _, p := range []string{"Disabled", "WithVersionUpgrade"} {
		if r := d.Ctl("keys", "policy", "kek", "--policy", p); r.code != 0 || !strings.Contains(r.stdout, "key-encryption-key: policy "+p) {
			t.Errorf("kek policy %s after a rotation: %s", p, r)
		}
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
