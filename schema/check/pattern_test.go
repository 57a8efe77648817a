package check

import (
	"regexp"
	"strings"
	"testing"
)

// patterns returns every pattern of the generated schemas.
func patterns() []*pattern {
	var out []*pattern
	seen := map[*node]bool{}
	var walk func(n *node)
	walk = func(n *node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		if n.pattern != nil {
			out = append(out, n.pattern)
		}
		for _, p := range append(append([]prop{}, n.props...), n.dependent...) {
			walk(p.node)
		}
		for _, c := range append([]*node{n.additional, n.items, n.ifS, n.thenS, n.elseS}, n.allOf...) {
			walk(c)
		}
	}
	for _, root := range generated {
		walk(root)
	}
	return out
}

func checkPatterns(t *testing.T, s string) {
	for _, p := range patterns() {
		if got, want := p.match(s), regexp.MustCompile(p.src).MatchString(s); got != want {
			t.Errorf("pattern %s on %q: match = %v, regexp says %v", p.src, s, got, want)
		}
	}
}

// TestPatternsAgreeWithRegexp: the generated programs match what package
// regexp (which jsonschema uses) matches.
func TestPatternsAgreeWithRegexp(t *testing.T) {
	if n := len(patterns()); n < 8 {
		t.Fatalf("only %d patterns found", n)
	}
	for _, s := range []string{"", "none", "None", "0000:00:02.0", "0000:00:02.0\n", "x0000:00:02.0", "1:0:2:0", "0:1", "2:0", "51712", "fa:16:3e:00:00:01",
		"FA:16:3E:00:00:0G", "/dev/sda", "dev/sda", "data-2", "a_b", strings.Repeat("a", 255), strings.Repeat("a", 256), "\xff", "1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e"} {
		checkPatterns(t, s)
	}
}

func FuzzPatterns(f *testing.F) {
	for _, s := range []string{"none", "0000:00:02.0", "fa:16:3e:00:00:01", "/x", "1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e", "1:0"} {
		f.Add(s)
	}
	f.Fuzz(checkPatterns)
}
