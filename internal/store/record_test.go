package store

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckKey(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen)
	for _, key := range []string{"a", "flavor/m1.small", "device/0000:3b:00.0", "A-Z_a-z.0-9:x/y", long} {
		if err := CheckKey(key); err != nil {
			t.Errorf("CheckKey(%.40q): %v", key, err)
		}
	}
	for _, tc := range []struct{ key, want string }{
		{"", "empty"},
		{long + "k", "(513 bytes): longer than 512 bytes"},
		{"/a", `starts or ends with "/"`},
		{"a/", `starts or ends with "/"`},
		{"a//b", `contains "//"`},
		{"a b", `character " " at byte 1`},
		{"é", `character "\xc3" at byte 0`},
		{"a{b}", `character "{" at byte 1`},
	} {
		err := CheckKey(tc.key)
		if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckKey(%.40q) = %v, want invalid key: %s", tc.key, err, tc.want)
		}
	}
	// A long key is cut in the message.
	if err := CheckKey(long + "k"); len(err.Error()) > 120 {
		t.Errorf("error for a long key is %d bytes: %s", len(err.Error()), err)
	}
}

func TestCheckPrefix(t *testing.T) {
	for _, p := range []string{"", "a", "a/", "flavor/", "a/b/"} {
		if err := CheckPrefix(p); err != nil {
			t.Errorf("CheckPrefix(%q): %v", p, err)
		}
	}
	for _, p := range []string{"/", "/a", "a//", "a*", strings.Repeat("k", MaxKeyLen+1)} {
		if err := CheckPrefix(p); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("CheckPrefix(%.40q) = %v, want invalid key", p, err)
		}
	}
}
