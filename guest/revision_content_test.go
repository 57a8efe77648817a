package guest_test

import (
	"context"
	"testing"
)

// TestOlderRevisionSameDevices: a document of the same instance with an
// older revision but the devices already applied is current, not lagging:
// hostctl leaves the firmware entries (and their revision) alone while a
// publish changes nothing they carry (issue 23 item 4). It applies
// without an error, and the state keeps the newer revision.
func TestOlderRevisionSameDevices(t *testing.T) {
	e := newEnv(t)
	e.src.set(withRevision(doc1, "5"))
	if rep := e.apply(); rep.State.Revision != 5 {
		t.Fatalf("revision %d", rep.State.Revision)
	}
	e.src.set(withRevision(doc1, "3"))
	rep, err := e.agent.Apply(context.Background())
	if err != nil {
		t.Fatalf("the same devices at an older revision: %v", err)
	}
	if rep.State.Revision != 5 || rep.State.LastError != "" {
		t.Errorf("state: revision %d, last error %q; want 5 and none", rep.State.Revision, rep.State.LastError)
	}
}
