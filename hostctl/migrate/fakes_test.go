package migrate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// world is two hosts, "a" (the source) and "b", over one real store,
// with an instance "vm" of a's: what each host has of it, kept by fakes
// that are as idempotent as the real sides (core.go) must be.
type world struct {
	t   *testing.T
	mu  sync.Mutex
	st  Records
	dir string

	owner string // the instance record's host
	// per host: domain defined, running, files present, libvirt secrets
	// defined, device claimed (a burned device stays burned: burned).
	domain, running, files, lvSecrets, claimed, burned map[string]bool
	// secrets: whose key wraps each; kept: the source's kept wrap.
	wrap map[string]string
	kept map[string]bool
	// received are b's received files, by name, as bytes.
	received map[string][]byte
	// fail makes the named fake call fail once (its count-th call).
	fail map[string]int
	// calls counts the fakes' calls.
	calls map[string]int
}

const uuid = "11111111-2222-4333-8444-555555555555"

func newWorld(t *testing.T) *world {
	w := &world{t: t, st: stores.Bolt(t), dir: t.TempDir(), owner: "a",
		domain: map[string]bool{"a": true}, running: map[string]bool{"a": true}, files: map[string]bool{"a": true},
		lvSecrets: map[string]bool{"a": true}, claimed: map[string]bool{"a": true}, burned: map[string]bool{"a": true},
		wrap: map[string]string{"s1": "a", "s2": "a"}, kept: map[string]bool{}, received: map[string][]byte{},
		fail: map[string]int{}, calls: map[string]int{}}
	for _, f := range []string{"disk.root", "disk.eph0"} {
		if err := os.WriteFile(filepath.Join(w.dir, f), bytes.Repeat([]byte(f), 1000), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(w.dir, "template"), []byte("blank"), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// call counts a fake call and fails it when w.fail says so.
func (w *world) call(name string) error {
	w.calls[name]++
	if n, ok := w.fail[name]; ok && n == w.calls[name] {
		delete(w.fail, name)
		return fmt.Errorf("injected failure of %s", name)
	}
	return nil
}

func (w *world) migrator() *Migrator {
	return &Migrator{Store: w.st, Host: "a", Source: &fakeSource{w}, Hosts: fakeHosts{w}, Log: slog.New(slog.DiscardHandler)}
}

// state renders everything both hosts have of the instance.
func (w *world) state() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "owner=%s", w.owner)
	for _, h := range []string{"a", "b"} {
		fmt.Fprintf(&b, " %s:[domain=%t running=%t files=%t lvsecrets=%t claimed=%t burned=%t]", h, w.domain[h], w.running[h], w.files[h], w.lvSecrets[h], w.claimed[h], w.burned[h])
	}
	ids := []string{}
	for id := range w.wrap {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintf(&b, " %s=%s", id, w.wrap[id])
		if w.kept[id] {
			b.WriteString("+kept")
		}
	}
	return b.String()
}

// fakeSource is host a.
type fakeSource struct{ w *world }

func (s *fakeSource) UUID(_ context.Context, name string) (string, error) {
	if name != "vm" {
		return "", fmt.Errorf("instance %s: %w", name, ErrNoMove)
	}
	return uuid, nil
}

func (s *fakeSource) Check(context.Context, string) (Instance, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.w.owner != "a" {
		return Instance{}, fmt.Errorf("%w: vm lives on %s", ErrState, s.w.owner)
	}
	return Instance{Name: "vm", UUID: uuid, Running: s.w.running["a"], Spec: []byte(`{"name":"vm"}`)}, nil
}

func (s *fakeSource) Stop(context.Context, Record) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("stop"); err != nil {
		return err
	}
	s.w.running["a"], s.w.lvSecrets["a"] = false, false
	return nil
}

func (s *fakeSource) Disks(context.Context, Record) ([]DiskFile, error) {
	var out []DiskFile
	for _, f := range []string{"disk.root", "disk.eph0"} {
		df := DiskFile{Name: f, Path: filepath.Join(s.w.dir, f)}
		if f == "disk.eph0" {
			df.Backing, df.BackingFormat, df.BackingPath = "instances/_base/template", "qcow2", filepath.Join(s.w.dir, "template")
			df.Secret = "s2"
		} else {
			df.Secret = "s1"
		}
		out = append(out, df)
	}
	return out, nil
}

func (s *fakeSource) Secrets(context.Context, string) ([]string, error) {
	return []string{"s1", "s2"}, nil
}

func (s *fakeSource) Passphrase(_ context.Context, id string) ([]byte, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.w.wrap[id] == "a" || s.w.kept[id] {
		return []byte("pass-" + id), nil
	}
	return nil, fmt.Errorf("secret %s: not a's", id)
}

func (s *fakeSource) Cleanup(context.Context, Record) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("source-cleanup"); err != nil {
		return err
	}
	if s.w.owner == "a" {
		return fmt.Errorf("cleanup of the source while it owns the instance")
	}
	s.w.domain["a"], s.w.running["a"], s.w.files["a"], s.w.lvSecrets["a"], s.w.claimed["a"] = false, false, false, false, false
	return nil
}

func (s *fakeSource) ForgetSecret(_ context.Context, id string) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("forget-secret"); err != nil {
		return err
	}
	delete(s.w.kept, id)
	return nil
}

func (s *fakeSource) SecretBack(_ context.Context, id string) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("secret-back"); err != nil {
		return err
	}
	if s.w.kept[id] {
		s.w.wrap[id] = "a"
		delete(s.w.kept, id)
	}
	if s.w.wrap[id] != "a" {
		return fmt.Errorf("secret %s: no kept wrap and not a's", id)
	}
	return nil
}

func (s *fakeSource) TakeBack(_ context.Context, rec Record) error {
	if string(rec.SourceSpec) != `{"name":"vm"}` {
		return fmt.Errorf("take back without the source's spec (%q)", rec.SourceSpec)
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("take-back"); err != nil {
		return err
	}
	s.w.owner = "a"
	return nil
}

func (s *fakeSource) Restart(_ context.Context, rec Record) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("restart"); err != nil {
		return err
	}
	if s.w.owner != "a" || s.w.wrap["s1"] != "a" {
		return fmt.Errorf("restart of a before it owns the instance and its secrets")
	}
	if rec.WasRunning {
		s.w.running["a"], s.w.lvSecrets["a"] = true, true
	}
	return nil
}

type fakeHosts struct{ w *world }

func (h fakeHosts) Destination(_ context.Context, host string) (Destination, error) {
	switch host {
	case "b":
		return &fakeDest{h.w}, nil
	case "down":
		return nil, fmt.Errorf("%w: host down: its heartbeat is stale", ErrUnavailable)
	}
	return nil, fmt.Errorf("%w: host %q: no such host in the store", ErrInvalid, host)
}

// fakeDest is host b.
type fakeDest struct{ w *world }

func (d *fakeDest) Preflight(_ context.Context, rec Record) ([]string, error) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if err := d.w.call("preflight"); err != nil {
		return nil, err
	}
	var need []string
	for _, f := range rec.Disks {
		if f.Backing != "" {
			need = append(need, f.Backing)
		}
	}
	return need, nil
}

func (d *fakeDest) ReceiveDisk(_ context.Context, _ Record, f DiskFile, body io.Reader) error {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if err := d.w.call("receive-disk"); err != nil {
		return err
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != f.SHA256 || int64(len(b)) != f.Size {
		return fmt.Errorf("disk %s: checksum or size differs", f.Name)
	}
	d.w.received[f.Name] = b
	return nil
}

func (d *fakeDest) ReceiveSecret(_ context.Context, _ Record, id string, pass []byte) error {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if err := d.w.call("receive-secret"); err != nil {
		return err
	}
	if string(pass) != "pass-"+id {
		return fmt.Errorf("secret %s: wrong passphrase", id)
	}
	if d.w.wrap[id] != "b" {
		d.w.kept[id] = true
		d.w.wrap[id] = "b"
	}
	return nil
}

func (d *fakeDest) TakeOver(context.Context, Record) error {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if err := d.w.call("take-over"); err != nil {
		return err
	}
	d.w.owner = "b"
	return nil
}

func (d *fakeDest) Start(_ context.Context, rec Record) error {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if err := d.w.call("start"); err != nil {
		return err
	}
	if d.w.owner != "b" || len(d.w.received) != 3 || d.w.wrap["s1"] != "b" || d.w.wrap["s2"] != "b" {
		return fmt.Errorf("start on b without the record, the disks (%d) or the secrets", len(d.w.received))
	}
	d.w.files["b"], d.w.domain["b"], d.w.claimed["b"], d.w.burned["b"] = true, true, true, true
	if rec.WasRunning {
		d.w.running["b"], d.w.lvSecrets["b"] = true, true
	}
	return nil
}

func (d *fakeDest) Cleanup(context.Context, Record) error {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if err := d.w.call("dest-cleanup"); err != nil {
		return err
	}
	d.w.files["b"], d.w.domain["b"], d.w.running["b"], d.w.lvSecrets["b"], d.w.claimed["b"] = false, false, false, false, false
	d.w.received = map[string][]byte{}
	return nil
}
