package clip

import (
	"strings"
	"testing"

	"github.com/vmeta/vmeta/schema"
)

func TestString(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{"short", "/v1/instances", Log, "/v1/instances"},
		{"exactly max", strings.Repeat("x", 4), 4, "xxxx"},
		{"one over", strings.Repeat("x", 5), 4, "xxxx… (5 bytes)"},
		{"a megabyte path", "/" + strings.Repeat("a", 1<<20), 3, "/aa… (1048577 bytes)"},
		{"never splits a rune", strings.Repeat("é", 10), 3, "ééé… (20 bytes)"},
		{"empty", "", 3, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.in, tt.max); got != tt.want {
				t.Errorf("String = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	if got, want := Quote("a\nb", 8), `"a\nb"`; got != want {
		t.Errorf("Quote = %s, want %s", got, want)
	}
	if got, want := Quote("abcdef", 2), `"ab"… (6 bytes)`; got != want {
		t.Errorf("Quote = %s, want %s", got, want)
	}
}

func TestAny(t *testing.T) {
	big := map[string]any{"k": strings.Repeat("v", 1000)}
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"nil", nil, nil},
		{"number", 42, 42},
		{"bool", true, true},
		{"long string", strings.Repeat("u", 900<<10), "uuuu… (921600 bytes)"},
		{"small object stays", map[string]any{"a": 1}, nil},
		{"big object is cut", big, `{"k"… (1008 bytes)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Any(tt.in, 4)
			if tt.name == "small object stays" {
				got = Any(tt.in, 64)
				if m, ok := got.(map[string]any); !ok || m["a"] != 1 {
					t.Errorf("Any = %#v, want the object", got)
				}
				return
			}
			if got != tt.want {
				t.Errorf("Any = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// TestQuoteMatchesSchema: package schema imports nothing of vmeta, so it
// keeps its own QuoteValue for the schema's messages; it must cut exactly
// as Quote does.
func TestQuoteMatchesSchema(t *testing.T) {
	for _, s := range []string{"", "oracledb", strings.Repeat("x", Value), strings.Repeat("x", Value+1), strings.Repeat("é", 100), "a\nb\u202e", strings.Repeat("a", 70000)} {
		if got, want := Quote(s, Value), schema.QuoteValue(s); got != want {
			t.Errorf("Quote(%.20q) = %s, schema.QuoteValue = %s", s, got, want)
		}
	}
}
