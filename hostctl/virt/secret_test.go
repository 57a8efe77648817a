package virt

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// TestSecretsAgainstLibvirt defines, lists and undefines volume secrets
// in the real libvirtd; the value is private (virsh cannot read it back).
func TestSecretsAgainstLibvirt(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	c := connect(t, uri, ConnOptions{})
	ctx := testCtx(t, time.Minute)
	prefix := "vmeta-test/" + randomUUID(t)[:8] + "/"
	a := LibvirtSecret{UUID: randomUUID(t), Usage: prefix + "a"}
	b := LibvirtSecret{UUID: randomUUID(t), Usage: prefix + "b"}
	t.Cleanup(func() {
		for _, s := range []LibvirtSecret{a, b} {
			_ = c.UndefineSecret(ctx, s.UUID)
		}
	})
	for _, s := range []LibvirtSecret{a, b} {
		if err := c.DefineSecret(ctx, s, []byte("pass-"+s.Usage)); err != nil {
			t.Fatal(err)
		}
	}
	// Redefining the same UUID (a start after a crash) works.
	if err := c.DefineSecret(ctx, a, []byte("again")); err != nil {
		t.Fatal(err)
	}
	// Another UUID with the same usage is refused by libvirt.
	if err := c.DefineSecret(ctx, LibvirtSecret{UUID: randomUUID(t), Usage: a.Usage}, []byte("x")); err == nil {
		t.Fatal("second secret with the same usage accepted")
	}
	got, err := c.Secrets(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("Secrets(%s) = %+v", prefix, got)
	}
	xml := virsh(t, uri, "secret-dumpxml", a.UUID)
	for _, want := range []string{"ephemeral='no'", "private='yes'", "<usage type='volume'>", "<volume>" + a.Usage + "</volume>"} {
		if !strings.Contains(xml, want) {
			t.Errorf("secret XML lacks %s:\n%s", want, xml)
		}
	}
	out, err := virshErr(t, uri, "secret-get-value", a.UUID)
	if err == nil || strings.Contains(out, "again") {
		t.Fatalf("private secret's value readable: %s", out)
	}
	if err := c.UndefineSecret(ctx, a.UUID); err != nil {
		t.Fatal(err)
	}
	if err := c.UndefineSecret(ctx, a.UUID); err != nil {
		t.Fatalf("undefine twice: %v", err)
	}
	got, _ = c.Secrets(ctx, prefix)
	if len(got) != 1 || got[0] != b {
		t.Fatalf("after undefine: %+v", got)
	}
}

func TestSecretXMLRefusesBadInput(t *testing.T) {
	for _, s := range []LibvirtSecret{{UUID: "nope", Usage: "u"}, {UUID: "0a81f5b2-8403-7b23-c8d6-21ccc2f80d6f"}} {
		if _, err := SecretXML(s); err == nil {
			t.Errorf("SecretXML(%+v) accepted", s)
		}
	}
	if _, err := parseSecretUUID("0a81f5b2-8403-7b23-c8d6-21ccc2f80d6f"); err != nil {
		t.Fatal(err)
	}
	if err := errors.New("x"); isNoSecret(err) {
		t.Fatal("isNoSecret")
	}
}

// virshErr runs virsh against uri and returns its output and error.
func virshErr(t *testing.T, uri string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(testenv.LookPath(t, "virsh"), append([]string{"-q", "-c", uri}, args...)...).CombinedOutput()
	return string(out), err
}
