package keys

import (
	"encoding/json"
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

// FuzzRewrapRecord: rewrapping a stored secret record (any bytes) never
// panics; what it accepts comes out with every value of this KEK under
// the current generation, unwrapping to what it held before.
func FuzzRewrapRecord(f *testing.F) {
	m := &Manager{keyID: "kek-fuzz"}
	r := &keyring{cur: 2, keys: map[int64][]byte{1: make([]byte, keyLen), 2: append(make([]byte, keyLen-1), 1)}}
	m.ring.Store(&keyring{cur: 1, keys: r.keys})
	w, err := m.wrap([]byte("passphrase"), "00000000-0000-4000-8000-000000000001")
	if err != nil {
		f.Fatal(err)
	}
	p, _ := m.wrap([]byte("pending"), PendingID("00000000-0000-4000-8000-000000000001"))
	m.ring.Store(r)
	good, _ := json.Marshal(secretRecord{Secret: Secret{UUID: "00000000-0000-4000-8000-000000000001", KeyID: m.keyID, Generation: 1}, Wrapped: w, Pending: &p})
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"uuid":"x","wrapped":{"key_id":"kek-fuzz","generation":1,"nonce":"AAAA","ciphertext":""}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var before secretRecord
		if json.Unmarshal(b, &before) != nil {
			return
		}
		out, err := m.rewrapRecord(r, stale{key: secretPrefix + "00000000-0000-4000-8000-000000000001", value: b})
		if err != nil {
			return
		}
		var after secretRecord
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("rewrapped record does not decode: %v", err)
		}
		id := before.UUID
		if id == "" {
			id = "00000000-0000-4000-8000-000000000001"
		}
		if m.isStale(before.Wrapped, r.cur) {
			if after.Wrapped.Generation != r.cur {
				t.Fatalf("wrapped value left at generation %d", after.Wrapped.Generation)
			}
			old, err1 := m.unwrapWith(r, before.Wrapped, id)
			now, err2 := m.unwrapWith(r, after.Wrapped, id)
			if err1 != nil || err2 != nil || string(old) != string(now) {
				t.Fatalf("rewrap changed the value: %v %v", err1, err2)
			}
		}
	})
}
