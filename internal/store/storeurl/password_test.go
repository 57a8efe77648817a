package storeurl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestURLHasPassword(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"redis://user:pw@host:6379/0", true},
		{"redis://:pw@host:6379/0", true},
		{"redis://user@host:6379/0", false},
		{"redis://host:6379/0", false},
		{"rediss+cluster://u:p@h1,h2", true},
		{"redis+cluster://h1,h2", false},
		{"redis+sentinel://mymaster@h1/0", false},
		{"redis+sentinel://u:p@mymaster@h1/0", true},
		{"redis+sentinel://m@h1/0?sentinel_password=x", true},
		{"bolt:///var/lib/vmeta/a:b@c.db", false},
		{"bolt", false},
		{"", false},
		{"nonsense", false},
	} {
		if got := URLHasPassword(tc.url); got != tc.want {
			t.Errorf("URLHasPassword(%s) = %v, want %v", Redact(tc.url), got, tc.want)
		}
	}
}

func TestPassword(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := func(k string) string {
		if k == PasswordEnv {
			return "from-env"
		}
		return ""
	}
	for _, tc := range []struct {
		name, file, want, wantErr string
	}{
		{"file, newline", write("a", "pw-a\n"), "pw-a", ""},
		{"file, CRLF and more lines", write("b", "pw-b\r\nignored\n"), "pw-b", ""},
		{"file wins over the environment", write("c", "pw-c"), "pw-c", ""},
		{"environment", "", "from-env", ""},
		{"empty file", write("d", "\n"), "", "empty"},
		{"missing file", filepath.Join(dir, "none"), "", "no such file"},
		{"oversized file", write("e", strings.Repeat("x", maxPasswordFile+1)), "", "longer than"},
	} {
		got, err := Password(tc.file, env)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--store-password-file") {
				t.Errorf("%s: Password = %q, %v; want an error with %q", tc.name, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: Password = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
