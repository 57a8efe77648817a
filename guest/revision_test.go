package guest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/guest"
	"github.com/vmeta/vmeta/guest/source"
	"github.com/vmeta/vmeta/guest/uevent"
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

// flakyDriveSource answers first with the firmware's document and a drive
// that failed to read (its medium was changing), then with the drive's
// newer document.
type flakyDriveSource struct {
	mu    sync.Mutex
	reads int
}

func (s *flakyDriveSource) String() string { return "firmware and a flaky drive" }

func (s *flakyDriveSource) Fetch(context.Context) (*source.Document, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if s.reads == 1 {
		d, err := source.Parse([]byte(withRevision(doc1, "2")))
		if err != nil {
			return nil, err
		}
		d.Origin, d.Source = "firmware", source.KindFirmware
		d.Sources = []source.SourceResult{{Source: source.KindFirmware, Origin: "firmware", Revision: 2, Used: true},
			{Source: source.KindDrive, Error: "config drive /dev/sr0: medium changing"}}
		return d, nil
	}
	d, err := source.Parse([]byte(withRevision(strings.Replace(doc1, "squidcache", "from-drive", 1), "3")))
	if err != nil {
		return nil, err
	}
	d.Origin, d.Source = "config drive /dev/sr0", source.KindDrive
	return d, nil
}

// TestRunRereadsAfterAFailedTransport: a pass that got its document from
// one transport while another that is there failed reads again soon (not
// after the poll interval), and the newer document applies without any
// device event.
func TestRunRereadsAfterAFailedTransport(t *testing.T) {
	e := newEnv(t)
	src := &flakyDriveSource{}
	e.cfg.Source = src
	e.agent = guest.New(e.cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.agent.Run(ctx, guest.RunOptions{Events: make(chan uevent.Event), PollInterval: time.Hour})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := guest.ReadState(e.cfg.StateDir)
		if err == nil && st.Revision == 3 {
			if st.Source != source.KindDrive {
				t.Errorf("revision 3 applied from %q", st.Source)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drive's newer document was not read again; log:\n%s", e.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !e.record("b252:16").HasLink("disk/by-tag/from-drive") {
		t.Error("the drive's tag was not applied")
	}
}
