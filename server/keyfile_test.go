package server

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

func TestParseKeyFile(t *testing.T) {
	since := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, text string
		want       []KeyEntry // Key, Generation, State, Since
		err        string
	}{
		{name: "plain", text: "\n  cur \r\n\nprior\n", want: []KeyEntry{
			{Key: []byte("cur"), State: KeyCurrent}, {Key: []byte("prior"), State: KeyPrior}}},
		{name: "comments", text: "# a comment\ncur\n   # another\nprior\n", want: []KeyEntry{
			{Key: []byte("cur"), State: KeyCurrent}, {Key: []byte("prior"), State: KeyPrior}}},
		{name: "annotated", text: "# vmeta key file\n# vmeta-key generation=5 state=current since=2026-11-24T12:00:00Z\nk5\n" +
			"# vmeta-key generation=6 state=next since=2026-11-24T12:00:00Z future=field\nk6\n# vmeta-key generation=4 state=prior\nk4\n",
			want: []KeyEntry{
				{Key: []byte("k5"), Generation: 5, State: KeyCurrent, Since: since},
				{Key: []byte("k6"), Generation: 6, State: KeyNext, Since: since},
				{Key: []byte("k4"), Generation: 4, State: KeyPrior}}},
		{name: "annotation without state", text: "# vmeta-key generation=2\nk2\nk1\n", want: []KeyEntry{
			{Key: []byte("k2"), Generation: 2, State: KeyCurrent}, {Key: []byte("k1"), State: KeyPrior}}},
		{name: "empty", text: "\n \n", err: "no key in it"},
		{name: "only comments", text: "# x\n", err: "no key in it"},
		{name: "dangling annotation", text: "k1\n# vmeta-key generation=2 state=prior\n", err: "line 2: key annotation not followed by a key"},
		{name: "two annotations", text: "# vmeta-key generation=1\n# vmeta-key generation=2\nk\n", err: "line 1: key annotation not followed by a key"},
		{name: "bad generation", text: "# vmeta-key generation=-1\nsecret-a\n", err: `line 1: key annotation generation "-1": must be a whole number ≥ 0`},
		{name: "bad state", text: "# vmeta-key state=old\nsecret-a\n", err: `key annotation state "old": must be current, next or prior`},
		{name: "bad since", text: "# vmeta-key since=yesterday\nsecret-a\n", err: `key annotation since "yesterday": must be an RFC 3339 time`},
		{name: "bad field", text: "# vmeta-key generation\nsecret-a\n", err: `key annotation field "generation": must be name=value`},
		{name: "next first", text: "# vmeta-key generation=2 state=next\nsecret-a\nsecret-b\n", err: "the first key is next, not current"},
		{name: "current later", text: "secret-a\n# vmeta-key generation=2 state=current\nsecret-b\n", err: "key generation 2 is marked current but is not the first key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKeyFile([]byte(tc.text))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "secret-") {
					t.Fatalf("the error shows a key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d entries, want %d", len(got), len(tc.want))
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if !bytes.Equal(g.Key, w.Key) || g.Generation != w.Generation || g.State != w.State || !g.Since.Equal(w.Since) {
					t.Errorf("entry %d: %q %s, want %q %s", i, g.Key, g, w.Key, w)
				}
			}
			// What FormatKeyFile writes parses back the same.
			again, err := ParseKeyFile(FormatKeyFile(got))
			if err != nil || len(again) != len(got) {
				t.Fatalf("round trip: %v", err)
			}
			for i := range again {
				if !bytes.Equal(again[i].Key, got[i].Key) || again[i].Generation != got[i].Generation || again[i].State != got[i].State || !again[i].Since.Equal(got[i].Since) {
					t.Errorf("round trip entry %d: %s, want %s", i, again[i], got[i])
				}
			}
		})
	}
}

func TestKeySet(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"k\n", ""},
		{"# vmeta-keyset id=abc-123\nk\n", "abc-123"},
		{"  # vmeta-keyset id=abc\r\nk\n", "abc"},
		{"# vmeta-keyset id=ABC\nk\n", ""},
		{"# vmeta-keyset id=\nk\n", ""},
		{"# vmeta-keyset id=" + strings.Repeat("a", 65) + "\nk\n", ""},
	} {
		if got := KeySetOf([]byte(tc.text)); got != tc.want {
			t.Errorf("KeySetOf(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
	es := []KeyEntry{{Key: []byte("k"), Generation: 1, State: KeyCurrent}}
	id := NewKeySetID()
	data := FormatKeyFileSet(id, es)
	if KeySetOf(data) != id {
		t.Errorf("FormatKeyFileSet lost the set:\n%s", data)
	}
	if got, err := ParseKeyFile(data); err != nil || len(got) != 1 {
		t.Errorf("a file with a set: %v %v", got, err)
	}
	// A created key file names a set of its own.
	p := filepath.Join(t.TempDir(), "token.key")
	if _, _, err := ReadOrCreateKeyFile(p); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	f := NewKeyFile("token", p, &KeyRing{}, quietLogger())
	if _, err := f.Reload(); err != nil || KeySetOf(b) == "" || f.Set() != KeySetOf(b) {
		t.Errorf("created file's set %q, loaded %q (%v)", KeySetOf(b), f.Set(), err)
	}
}

func FuzzParseKeyFile(f *testing.F) {
	f.Add([]byte("k\n"))
	f.Add([]byte("# vmeta-key generation=5 state=current since=2026-11-24T12:00:00Z\nk5\n# vmeta-key generation=6 state=next\nk6\n"))
	f.Add([]byte("# vmeta-key generation=1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := ParseKeyFile(data)
		if err != nil {
			return
		}
		if es[0].State != KeyCurrent {
			t.Fatalf("first entry %s", es[0].State)
		}
		again, err := ParseKeyFile(FormatKeyFile(es))
		if err != nil {
			t.Fatalf("formatted file does not parse: %v", err)
		}
		if len(again) != len(es) {
			t.Fatalf("round trip: %d entries, want %d", len(again), len(es))
		}
		for i := range es {
			if !bytes.Equal(again[i].Key, es[i].Key) || again[i].Generation != es[i].Generation || again[i].State != es[i].State {
				t.Fatalf("round trip entry %d: %s, want %s", i, again[i], es[i])
			}
		}
	})
}

// TestKeyFileReload: a changed file replaces the keys; a missing, empty
// or malformed one keeps the keys loaded before, counts an error and logs
// it (the log is checked for the keys by TestMain).
func TestKeyFileReload(t *testing.T) {
	p := filepath.Join(t.TempDir(), "proxy.secret")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(p+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			t.Fatal(err)
		}
	}
	write(testProxySecret + "\n")
	f := NewKeyFile("proxy", p, &KeyRing{}, quietLogger())
	if changed, err := f.Reload(); !changed || err != nil {
		t.Fatalf("first load: %v %v", changed, err)
	}
	if changed, err := f.Reload(); changed || err != nil {
		t.Fatalf("unchanged file: %v %v", changed, err)
	}
	write(string(FormatKeyFile([]KeyEntry{{Key: []byte(testPriorSecret), Generation: 2, State: KeyCurrent}, {Key: []byte(testProxySecret), Generation: 1, State: KeyPrior}})))
	if changed, err := f.Reload(); !changed || err != nil {
		t.Fatalf("changed file: %v %v", changed, err)
	}
	if string(f.Ring().Current()) != testPriorSecret || len(f.Ring().All()) != 2 || f.Generation() != 2 {
		t.Fatalf("keys after reload: generation %d, %d keys", f.Generation(), len(f.Ring().All()))
	}
	for _, bad := range []struct{ name, text string }{
		{"empty", ""},
		{"comments only", "# nothing\n"},
		{"malformed", "# vmeta-key generation=x\n" + testTokenKey + "\n"},
		{"missing", ""},
	} {
		if bad.name == "missing" {
			os.Remove(p)
		} else {
			write(bad.text)
		}
		errsBefore := f.errors.Load()
		if changed, err := f.Reload(); changed || err == nil {
			t.Fatalf("%s file: changed %v err %v", bad.name, changed, err)
		}
		if string(f.Ring().Current()) != testPriorSecret || len(f.Ring().All()) != 2 {
			t.Fatalf("%s file: the keys loaded before were not kept", bad.name)
		}
		if f.errors.Load() != errsBefore+1 {
			t.Errorf("%s file: error not counted", bad.name)
		}
	}
	if !strings.Contains(testLogs.String(), "metadata key file reload failed; keeping the keys loaded before") {
		t.Error("the failed reload was not logged")
	}
	write(testProxySecret + "\n")
	if changed, err := f.Reload(); !changed || err != nil || string(f.Ring().Current()) != testProxySecret {
		t.Fatalf("good file again: %v %v", changed, err)
	}
}

// TestRunFollowsKeys runs servers over the real embedded store: one
// reloads its key files when the feed announces a key rotation
// (KeyNotifier), another, with no feed message, on its key check timer.
func TestRunFollowsKeys(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	putInstance(t, st, richInstance(t))
	dir := t.TempDir()

	newServer := func(name string, check time.Duration) (*Server, string) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(testPriorSecret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		f := NewKeyFile("proxy", p, &KeyRing{}, quietLogger())
		if _, err := f.Reload(); err != nil {
			t.Fatal(err)
		}
		o := testOptions(at("2026-01-01"))
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
		o.ProxySecrets, o.KeyFiles, o.KeyCheckInterval, o.SweepInterval = f.Ring(), []*KeyFile{f}, check, -1
		s := New(st, o)
		runServer(t, s)
		return s, p
	}
	signed := func(s *Server, secret string) int {
		return req(s, "GET", "/latest/meta-data/hostname", proxyPeer, proxyHdr(richUUID, "demo", sig(secret, richUUID)), "").status
	}
	byFeed, feedFile := newServer("feed.secret", -1)
	byTimer, timerFile := newServer("timer.secret", 5*time.Millisecond)
	for _, s := range []*Server{byFeed, byTimer} {
		if c := signed(s, testProxySecret); c != 403 {
			t.Fatalf("a secret not yet in the file: %d, want 403", c)
		}
	}
	newFile := FormatKeyFile([]KeyEntry{{Key: []byte(testProxySecret), Generation: 2, State: KeyCurrent}, {Key: []byte(testPriorSecret), Generation: 1, State: KeyPrior}})
	for _, p := range []string{feedFile, timerFile} {
		if err := os.WriteFile(p, newFile, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the key check timer", func() bool { return signed(byTimer, testProxySecret) == 200 })
	// The feed: announce until it is heard (Run may not have subscribed
	// yet when the first announcement goes out).
	eventually(t, "the feed's key change", func() bool {
		if err := st.NotifyKey(t.Context(), store.KeyVersion{Class: "proxy-secret", Generation: 2}); err != nil {
			t.Fatal(err)
		}
		return signed(byFeed, testProxySecret) == 200
	})
	if c := signed(byFeed, testPriorSecret); c != 200 {
		t.Errorf("the prior secret: %d, want 200", c)
	}
	if err := byFeed.ReloadKeys(); err != nil {
		t.Errorf("ReloadKeys: %v", err)
	}
}

// TestKeyReaderRecord: a server with key files on a store that keeps
// records says, in a record of its own, which generations it has loaded:
// at start, after a reload that changed them, and no more once Run ends.
func TestKeyReaderRecord(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	p := filepath.Join(t.TempDir(), "token.key")
	os.WriteFile(p, FormatKeyFile([]KeyEntry{{Key: []byte(testTokenKey), Generation: 4, State: KeyCurrent}}), 0o600)
	f := NewKeyFile("token", p, &KeyRing{}, quietLogger())
	if _, err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	o := testOptions(at("2026-01-01"))
	o.TokenKeys, o.KeyFiles, o.KeyCheckInterval, o.KeyReaderID = f.Ring(), []*KeyFile{f}, -1, "reader-1"
	s := New(st, o)
	reader := func() (KeyReader, bool) {
		rs, err := KeyReaders(t.Context(), st, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.ID == "reader-1" {
				return r, true
			}
		}
		return KeyReader{}, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	eventually(t, "the reader's record", func() bool { r, ok := reader(); return ok && r.Keys["token"].Generation == 4 })
	os.WriteFile(p, FormatKeyFile([]KeyEntry{{Key: []byte(testTokenKey), Generation: 4, State: KeyCurrent}, {Key: []byte(testPriorSecret), Generation: 5, State: KeyNext}}), 0o600)
	if err := s.ReloadKeys(); err != nil {
		t.Fatal(err)
	}
	r, ok := reader()
	if !ok || r.Keys["token"] != (KeyReaderFile{Generation: 4, Newest: 5, Count: 2}) || !r.Expires.After(r.Updated) {
		t.Fatalf("record after the reload: %+v", r)
	}
	rec, _ := st.Record(t.Context(), KeyReaderPrefix+"reader-1")
	if strings.Contains(string(rec.Value), testTokenKey) || strings.Contains(string(rec.Value), testPriorSecret) {
		t.Fatal("the reader's record holds a key")
	}
	cancel()
	<-done
	if _, ok := reader(); ok {
		t.Error("the record outlived Run")
	}
}

// BenchmarkKeyFileCheck is the cost of one periodic check of an unchanged
// key file (read and hash; what every --key-check-interval costs per
// file).
func BenchmarkKeyFileCheck(b *testing.B) {
	p := filepath.Join(b.TempDir(), "token.key")
	var es []KeyEntry
	for g := int64(1); g <= 4; g++ {
		es = append(es, KeyEntry{Key: bytes.Repeat([]byte{'a' + byte(g)}, 64), Generation: 5 - g, State: KeyPrior})
	}
	es[0].State = KeyCurrent
	os.WriteFile(p, FormatKeyFile(es), 0o600)
	f := NewKeyFile("token", p, &KeyRing{}, quietLogger())
	if _, err := f.Reload(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if changed, err := f.Reload(); changed || err != nil {
			b.Fatal(changed, err)
		}
	}
}
