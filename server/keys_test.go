package server

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestReadKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	os.WriteFile(p, []byte("\n  current-key \r\n\nprior-key\n\n"), 0o600)
	keys, err := ReadKeyFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || string(keys[0]) != "current-key" || string(keys[1]) != "prior-key" {
		t.Errorf("keys %q", keys)
	}
	os.WriteFile(p, []byte(" \n\n"), 0o600)
	if _, err := ReadKeyFile(p); err == nil {
		t.Error("an empty key file was accepted")
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing key file was accepted")
	}
}

func TestReadOrCreateKeyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "token.key")
	// Several processes (here goroutines) starting at once agree on one key.
	var wg sync.WaitGroup
	keys := make([][][]byte, 8)
	created := make([]bool, 8)
	for i := range keys {
		wg.Go(func() {
			var err error
			keys[i], created[i], err = ReadOrCreateKeyFile(p)
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	n := 0
	for i := range keys {
		if created[i] {
			n++
		}
		if len(keys[i]) != 1 || string(keys[i][0]) != string(keys[0][0]) {
			t.Errorf("caller %d got %q, caller 0 %q", i, keys[i], keys[0])
		}
	}
	if n != 1 {
		t.Errorf("%d callers created the file, want 1", n)
	}
	if len(keys[0][0]) != 64 {
		t.Errorf("generated key %d characters, want 64 hex digits", len(keys[0][0]))
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(filepath.Dir(p)); di.Mode().Perm() != 0o700 {
		t.Errorf("key directory mode %v, want 0700", di.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	// An existing file is read, not replaced.
	again, created2, err := ReadOrCreateKeyFile(p)
	if err != nil || created2 || string(again[0]) != string(keys[0][0]) {
		t.Errorf("second call: %q created %v err %v", again, created2, err)
	}
}

func TestKeyRing(t *testing.T) {
	var zero KeyRing
	if zero.Current() != nil || zero.All() != nil {
		t.Error("zero KeyRing holds keys")
	}
	k := NewKeyRing([]byte("a"), nil, []byte("b"))
	if string(k.Current()) != "a" || len(k.All()) != 2 {
		t.Errorf("keys %q", k.All())
	}
	src := []byte("c")
	k.Set(src)
	src[0] = 'x'
	if string(k.Current()) != "c" {
		t.Error("Set does not copy")
	}
}

// TestCreatedTokenKeyIsGeneration1 (issue 20 item 9): a key file vmeta
// creates holds generation 1, current, since its creation, and the
// configuration that created it says so (Created) once: the next start
// reads the same file and did not create it.
func TestCreatedTokenKeyIsGeneration1(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token.key")
	log := quietLogger()
	for i, wantCreated := range []bool{true, false} {
		c := Config{TokenKeyFile: p, TokenPolicy: "optional"}
		o, err := c.Options(log)
		if err != nil {
			t.Fatal(err)
		}
		f := o.KeyFile("token")
		if f == nil || f.Created() != wantCreated {
			t.Fatalf("start %d: token key file %v, created %v, want %v", i, f, f != nil && f.Created(), wantCreated)
		}
		if f.Generation() != 1 {
			t.Errorf("start %d: loaded generation %d, want 1", i, f.Generation())
		}
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	es, err := ParseKeyFile(data)
	if err != nil || len(es) != 1 || es[0].Generation != 1 || es[0].State != KeyCurrent || es[0].Since.IsZero() || len(es[0].Key) != 64 {
		t.Fatalf("created file: %v %v", es, err)
	}
	if KeySetOf(data) == "" {
		t.Error("created file names no key set")
	}
}
