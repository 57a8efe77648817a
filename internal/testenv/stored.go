package testenv

import (
	"os"
	"reflect"
	"testing"
)

// Stored is a stored record format under test: its encoder and decoder,
// and Golden, the file (under testdata) the code wrote before the format
// had its own struct.
type Stored[T any] struct {
	Golden string
	Encode func(T) ([]byte, error)
	Decode func([]byte) (T, error)
}

// CheckGolden checks that v encodes to the golden file, byte for byte
// (rewritten first when update is set: see Golden).
func (s Stored[T]) CheckGolden(t testing.TB, v T, update bool) {
	t.Helper()
	got, err := s.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	Golden(t, s.Golden, got, update)
}

// CheckReads checks that the golden file still decodes, whole, to want;
// it returns the file's bytes for the caller's further reads.
func (s Stored[T]) CheckReads(t testing.TB, want T) []byte {
	t.Helper()
	b, err := os.ReadFile(s.Golden)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	return b
}

// CheckRoundTrip checks that v survives an encoding and a decoding
// whole: with v from Filled, a field the format forgets fails here.
func (s Stored[T]) CheckRoundTrip(t testing.TB, v T) {
	t.Helper()
	b, err := s.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Decode(b)
	if err != nil || !reflect.DeepEqual(got, v) {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, v)
	}
}
