package keys

import (
	"strconv"
	"testing"
)

// FuzzParseKEK: the key-file parser never panics, and what it accepts has
// a current generation with a key of the right length.
func FuzzParseKEK(f *testing.F) {
	f.Add([]byte(`{"key_id":"kek-1a2b3c4d","current":1,"keys":{"1":"` + "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff" + `"}}`))
	f.Add([]byte(`{"key_id":"k","current":2,"keys":{"1":"00"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		kf, err := parseKEK(b)
		if err != nil {
			return
		}
		if len(kf.Keys[strconv.FormatInt(kf.Current, 10)]) != 2*keyLen {
			t.Fatalf("accepted %q", b)
		}
	})
}
