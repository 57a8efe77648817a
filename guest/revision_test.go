package guest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/guest"
)

// withRevision adds vmeta_revision to a meta_data.json.
func withRevision(doc, rev string) string {
	return strings.Replace(doc, "{", `{"vmeta_revision": `+rev+`, `, 1)
}

// TestOlderRevisionChangesNothing: a document of the same instance with an
// older revision than the one applied (a transport lagging behind) changes
// nothing and is recorded; a newer one applies.
func TestOlderRevisionChangesNothing(t *testing.T) {
	e := newEnv(t)
	e.src.set(withRevision(doc1, "5"))
	rep := e.apply()
	if rep.State.Revision != 5 {
		t.Fatalf("revision %d", rep.State.Revision)
	}
	rules, _ := os.ReadFile(e.cfg.RulesFile)
	triggers := len(e.udev.Triggers)

	e.src.set(withRevision(strings.Replace(doc1, "squidcache", "older", 1), "4"))
	if _, err := e.agent.Apply(context.Background()); !errors.Is(err, guest.ErrOlderRevision) || !strings.Contains(err.Error(), "revision 4") {
		t.Fatalf("older revision: %v", err)
	}
	after, _ := os.ReadFile(e.cfg.RulesFile)
	if !bytes.Equal(rules, after) || len(e.udev.Triggers) != triggers {
		t.Error("an older revision changed the rules or udev")
	}
	st, err := guest.ReadState(e.cfg.StateDir)
	if err != nil || st.Revision != 5 || !strings.Contains(st.LastError, "older than revision 5") {
		t.Fatalf("state: %+v, %v", st, err)
	}

	e.src.set(withRevision(strings.Replace(doc1, "squidcache", "newer", 1), "6"))
	rep = e.apply()
	if rep.State.Revision != 6 || !e.record("b252:16").HasLink("disk/by-tag/newer") {
		t.Fatalf("newer revision not applied: %+v", rep.State)
	}
	var b bytes.Buffer
	if err := guest.WriteStatusTable(&b, rep.State); err != nil || !strings.Contains(b.String(), "metadata revision 6") {
		t.Errorf("status: %v\n%s", err, b.String())
	}
}
