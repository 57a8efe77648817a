package metadata

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// goldenTree reads the golden files (TestGolden's) as a tree.
func goldenTree(t *testing.T) *Tree {
	t.Helper()
	root := filepath.Join("testdata", "golden")
	tr := &Tree{Files: map[string][]byte{}}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		tr.Files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Files) == 0 {
		t.Fatal("no golden files")
	}
	return tr
}

// treeDictSHA256 pins the dictionary of treeMagic: stored trees depend on
// it byte for byte.
const treeDictSHA256 = "299464ea2c4a149214dfd28837a63ee838957a92369d9556d95eaabbcb2017f3"

// TestTreeDict: the committed dictionary (treedict.bin) is the one the
// stored form's magic was made with, and it pays: another instance's
// tree deflates to much less with it. With -update (go generate), it
// rewrites the dictionary from the golden tree and prints its hash: a
// new dictionary is a new stored form (a new magic, and DecodeTree keeps
// reading the old one with the old dictionary), never an edit of this
// one. (The golden files may change with rendering; the dictionary stays
// as it was made, and keeps paying while trees look alike.)
func TestTreeDict(t *testing.T) {
	tr := goldenTree(t)
	// -update is render_test.go's flag (the external test package's).
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
		dict := tr.stream()
		if len(dict) > treeDictWindow {
			dict = dict[len(dict)-treeDictWindow:]
		}
		if err := os.WriteFile("treedict.bin", dict, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("treedict.bin rewritten: %d bytes, sha256 %x", len(dict), sha256.Sum256(dict))
		return
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(treeDict)); got != treeDictSHA256 {
		t.Fatalf("treedict.bin has sha256 %s, want %s: the %s form is made with the pinned dictionary; a new one needs a new magic", got, treeDictSHA256, treeMagic)
	}

	// Another instance: the golden tree with its own identity.
	other := &Tree{Files: map[string][]byte{}}
	for p, b := range tr.Files {
		b = bytes.ReplaceAll(b, []byte("web-1"), []byte("db-42"))
		other.Files[p] = bytes.ReplaceAll(b, []byte("52:54:00"), []byte("52:54:01"))
	}
	enc, err := other.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	w, _ := flate.NewWriter(&plain, flate.DefaultCompression)
	w.Write(other.stream())
	w.Close()
	t.Logf("stored form: %d bytes with the dictionary, %d without", len(enc), plain.Len())
	if len(enc) >= plain.Len()*3/4 {
		t.Errorf("stored form with the dictionary: %d bytes, without: %d", len(enc), plain.Len())
	}
	got, err := DecodeTree(enc)
	if err != nil {
		t.Fatal(err)
	}
	SameTreeFiles(t, got, other)
}

// TestDecodeTreeV2: trees stored in the previous form ("VMT2": the same
// stream deflated without a dictionary) still decode.
func TestDecodeTreeV2(t *testing.T) {
	tr := goldenTree(t)
	var v2 bytes.Buffer
	v2.WriteString(treeMagicV2)
	w, _ := flate.NewWriter(&v2, flate.DefaultCompression)
	w.Write(tr.stream())
	w.Close()
	got, err := DecodeTree(v2.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	SameTreeFiles(t, got, tr)
}

// SameTreeFiles checks that a decoded tree, got, holds exactly the files
// of want, byte for byte (for metadata_test too).
func SameTreeFiles(t testing.TB, got, want *Tree) {
	t.Helper()
	if len(got.Files) != len(want.Files) {
		t.Errorf("decoded %d files, want %d", len(got.Files), len(want.Files))
	}
	for p, b := range want.Files {
		if !bytes.Equal(got.Files[p], b) {
			t.Errorf("%s differs after a round trip", p)
		}
	}
}
