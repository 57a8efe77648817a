package metadata_test

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
)

func exampleTree(t testing.TB) *metadata.Tree {
	t.Helper()
	b, err := os.ReadFile("../../examples/web.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in, err := model.ParseSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	return render(t, in)
}

func sameTree(t *testing.T, got, want *metadata.Tree) {
	t.Helper()
	if !maps.EqualFunc(got.Files, want.Files, bytes.Equal) {
		t.Errorf("files differ after the round trip")
	}
	if !maps.EqualFunc(got.DriveOnly, want.DriveOnly, bytes.Equal) {
		t.Errorf("drive-only files differ after the round trip")
	}
}

func TestTreeEncodingRoundTrip(t *testing.T) {
	for name, tr := range map[string]*metadata.Tree{
		"example":       exampleTree(t),
		"rich":          render(t, richInstance(t)), // has injected (drive-only) files
		"empty content": {Files: map[string][]byte{"openstack/latest/user_data": {}, "a": []byte("x")}},
	} {
		t.Run(name, func(t *testing.T) {
			enc, err := tr.Encode()
			if err != nil {
				t.Fatal(err)
			}
			got, err := metadata.DecodeTree(enc)
			if err != nil {
				t.Fatal(err)
			}
			sameTree(t, got, tr)
			// Decoded contents must not alias each other: appending to one
			// file must not change another.
			for p := range got.Files {
				got.Files[p] = append(got.Files[p], '!')
			}
			again, err := metadata.DecodeTree(enc)
			if err != nil {
				t.Fatal(err)
			}
			sameTree(t, again, tr)
		})
	}
}

// The stored form deduplicates and compresses: the example's tree is a
// small fraction of its JSON form.
func TestTreeEncodingSize(t *testing.T) {
	tr := exampleTree(t)
	enc, err := tr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("example tree: %d bytes stored, %d bytes as JSON", len(enc), len(js))
	if len(enc)*5 > len(js) {
		t.Errorf("stored form %d bytes is not under a fifth of the JSON form's %d", len(enc), len(js))
	}
}

// Documents written before the compact form (plain JSON) still decode.
func TestTreeDecodesJSONForm(t *testing.T) {
	tr := render(t, richInstance(t))
	js, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := metadata.DecodeTree(js)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, got, tr)
}

func TestTreeDecodeRejectsCorruption(t *testing.T) {
	enc, err := exampleTree(t).Encode()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"truncated":      enc[:len(enc)/2],
		"magic only":     []byte("VMT2"),
		"garbage":        append([]byte("VMT2"), 0xff, 0x00, 0x13),
		"not json":       []byte("{"),
		"json w/o files": []byte(`{"drive_only":{}}`),
	} {
		if _, err := metadata.DecodeTree(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func FuzzDecodeTree(f *testing.F) {
	enc, err := exampleTree(f).Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc)
	f.Add([]byte(`{"files":{"a":"eA=="}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := metadata.DecodeTree(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to the same tree.
		enc, err := tr.Encode()
		if err != nil {
			t.Fatal(err)
		}
		again, err := metadata.DecodeTree(enc)
		if err != nil {
			t.Fatal(err)
		}
		sameTree(t, again, tr)
	})
}

func BenchmarkTreeDecode(b *testing.B) {
	enc, err := exampleTree(b).Encode()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(enc)), "stored-bytes")
	for b.Loop() {
		if _, err := metadata.DecodeTree(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// storedTree deflates raw, the uncompressed body of the stored form.
func storedTree(t testing.TB, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteString("VMT2")
	zw, err := flate.NewWriter(&buf, flate.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// oneBlobManyPaths is the stored form of a tree whose paths all name one
// blob of size bytes.
func oneBlobManyPaths(t testing.TB, size, paths int) []byte {
	raw := binary.AppendUvarint(nil, 1)
	raw = binary.AppendUvarint(raw, uint64(size))
	raw = append(raw, make([]byte, size)...)
	raw = binary.AppendUvarint(raw, uint64(paths))
	for i := range paths {
		p := fmt.Sprintf("openstack/%d/user_data", i)
		raw = binary.AppendUvarint(raw, uint64(len(p)))
		raw = append(raw, p...)
		raw = binary.AppendUvarint(raw, 0)
	}
	raw = binary.AppendUvarint(raw, 0) // no drive-only files
	return storedTree(t, raw)
}

// TestDecodeTreeRefuses: stored trees DecodeTree refuses, with the error
// naming the problem. The fuzzer-found and the expanding inputs are also in
// testdata/fuzz/FuzzDecodeTree.
func TestDecodeTreeRefuses(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		// JSON with an empty file map decoded, but its re-encoding did
		// not (found by FuzzDecodeTree).
		{"json without files", []byte(`{"files":{}}`), "no files"},
		{"json null files", []byte(`{"files":null}`), "no files"},
		// 65 paths naming one 1 MiB blob: a 1 KiB document that serves
		// or writes 65 MiB.
		{"one blob, many paths", oneBlobManyPaths(t, 1<<20, 65), "files total more than 67108864 bytes (maxTreeBytes; 65 paths so far)"},
		{"content index out of range", storedTree(t, []byte{0, 1, 1, 'a', 0, 0}), "content index 0 out of range"},
		{"trailing bytes", storedTree(t, []byte{1, 1, 'x', 1, 1, 'a', 0, 0, 7}), "1 trailing bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := metadata.DecodeTree(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeTree = %v, %v; want an error containing %q", tr, err, tt.want)
			}
		})
	}
	// Just under the limit still decodes.
	if tr, err := metadata.DecodeTree(oneBlobManyPaths(t, 1<<20, 64)); err != nil || len(tr.Files) != 64 {
		t.Errorf("64 paths of 1 MiB: %v", err)
	}
}

// TestDecodeTreeScratch: a tree decoded into a scratch buffer is the tree
// DecodeTree returns, and after release the next decode reuses the
// buffer (it allocates a fraction of the bytes DecodeTree does; sync.Pool
// drops some of what it is given under the race detector, hence the
// margin), while a tree not yet released stays whole.
func TestDecodeTreeScratch(t *testing.T) {
	enc, err := exampleTree(t).Encode()
	if err != nil {
		t.Fatal(err)
	}
	want, err := metadata.DecodeTree(enc)
	if err != nil {
		t.Fatal(err)
	}
	held, releaseHeld, err := metadata.DecodeTreeScratch(enc)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, held, want)
	const runs = 200
	bytesPerDecode := func(f func()) uint64 {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&m1)
		return (m1.TotalAlloc - m0.TotalAlloc) / runs
	}
	plain := bytesPerDecode(func() {
		if _, err := metadata.DecodeTree(enc); err != nil {
			t.Fatal(err)
		}
	})
	scratch := bytesPerDecode(func() {
		tr, release, err := metadata.DecodeTreeScratch(enc)
		if err != nil {
			t.Fatal(err)
		}
		sameTree(t, tr, want)
		release()
	})
	sameTree(t, held, want) // the decodes since left the tree not released alone
	releaseHeld()
	t.Logf("bytes allocated per decode: DecodeTree %d, DecodeTreeScratch %d", plain, scratch)
	if scratch*2 > plain {
		t.Errorf("DecodeTreeScratch allocates %d bytes per decode, DecodeTree %d: the buffer is not reused", scratch, plain)
	}
	if _, _, err := metadata.DecodeTreeScratch([]byte("VMT3garbage")); err == nil {
		t.Error("DecodeTreeScratch of garbage: no error")
	}
}
