package schema_test

import (
	"strings"
	"testing"

	"github.com/vmeta/vmeta/schema"
)

func TestQuoteValue(t *testing.T) {
	long := strings.Repeat("a", 70000)
	runes := strings.Repeat("é", 100) // 2 bytes each
	tests := []struct {
		name, in, want string
	}{
		{"short", "oracledb", `"oracledb"`},
		{"empty", "", `""`},
		{"exactly the limit", strings.Repeat("x", schema.MaxQuoted), `"` + strings.Repeat("x", schema.MaxQuoted) + `"`},
		{"one over", strings.Repeat("x", schema.MaxQuoted+1), `"` + strings.Repeat("x", schema.MaxQuoted) + `"… (65 bytes)`},
		{"70,000 bytes", long, `"` + strings.Repeat("a", schema.MaxQuoted) + `"… (70000 bytes)`},
		{"cut between runes", runes, `"` + strings.Repeat("é", schema.MaxQuoted) + `"… (200 bytes)`},
		{"escapes", "a\nb", `"a\nb"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := schema.QuoteValue(tt.in); got != tt.want {
				t.Errorf("QuoteValue = %s\nwant          %s", got, tt.want)
			}
		})
	}
}
