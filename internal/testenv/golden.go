package testenv

import (
	"bytes"
	"os"
	"testing"
)

// Golden compares got with the golden file at path, after rewriting the
// file with got when update is set (the caller's -update flag: a flag
// here would be defined in every test binary that links testenv).
func Golden(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed (a format changes only on purpose: run the test with -update and commit the file)\n got %s\nwant %s", path, got, want)
	}
}
