// Package mantest checks manual pages the way an operator's man(1) and
// lintian read them: groff with every warning on must print nothing, and
// `man -l` must render the page.
package mantest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// Render checks the roff page with `groff -ww -z -man` (every warning on;
// any output fails the test) and returns it as `MANWIDTH=80 man -l` prints
// it, as plain text (no overstriking). name is the page's file name
// (hostctl.1), for messages.
func Render(t testing.TB, name string, page []byte) string {
	t.Helper()
	groff := testenv.LookPath(t, "groff")
	man := testenv.LookPath(t, "man")
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, page, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(groff, "-ww", "-z", "-man", p)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Errorf("groff -ww -z -man %s: %v\n%s", name, err, stderr.String())
	}
	stderr.Reset()
	cmd = exec.Command(man, "--warnings", "-E", "UTF-8", "-l", p)
	cmd.Env = append(os.Environ(), "MANWIDTH=80", "MAN_KEEP_FORMATTING=", "MANPAGER=cat", "PAGER=cat", "LANG=C.UTF-8")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Errorf("man -l %s: %v\n%s", name, err, stderr.String())
	}
	return string(out)
}

// Fold joins the text man printed into one line per paragraph's words
// (hyphenation at line ends undone is not attempted: pages are rendered
// with hyphenation as man does it), so that a test can look for a phrase
// that may wrap.
func Fold(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
