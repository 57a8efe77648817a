package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/vmeta/vmeta/internal/store"
)

// benchTreeSize is the tree of the benchmarked document: a typical rendered
// metadata tree (meta_data.json, network_data.json, vendor data, the EC2
// tree) is a few KiB.
const benchTreeSize = 4 << 10

func benchInstance(b *testing.B, s store.Store) (store.Instance, store.Document) {
	b.Helper()
	tree := make([]byte, benchTreeSize)
	_, _ = rand.NewChaCha8([32]byte{2}).Read(tree)
	in := newInstance("bench", uuidOf(1), "10.0.0.1", "2001:db8::1")
	doc := newDocument(in, "")
	doc.Tree = tree
	if _, _, err := s.Put(b.Context(), in, doc, -1); err != nil {
		b.Fatalf("Put: %v", err)
	}
	return in, doc
}

// BenchmarkPut measures Put replacing one instance (checks, new revision and
// version, record, document and address index rewritten) with a 4 KiB tree.
// s must be empty; the caller closes it.
func BenchmarkPut(b *testing.B, s store.Store) {
	in, doc := benchInstance(b, s)
	b.SetBytes(benchTreeSize)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.Put(b.Context(), in, doc, -1); err != nil {
			b.Fatalf("Put: %v", err)
		}
	}
}

// BenchmarkDocument measures what the metadata service does per request
// when it has no cached copy: LookupAddress, then Document (4 KiB tree), one
// caller at a time ("serial") and from all Ps ("parallel"); and
// DocumentVersion alone, the check of a cached copy. s must be empty; the
// caller closes it.
func BenchmarkDocument(b *testing.B, s store.Store) {
	in, _ := benchInstance(b, s)
	fetch := func() error {
		uuid, err := s.LookupAddress(b.Context(), "10.0.0.1")
		if err != nil {
			return err
		}
		doc, err := s.Document(b.Context(), uuid)
		if err == nil && len(doc.Tree) != benchTreeSize {
			err = fmt.Errorf("tree of %d bytes", len(doc.Tree))
		}
		return err
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := fetch(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := fetch(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("version", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.DocumentVersion(b.Context(), in.UUID); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLookupAddress measures LookupAddress alone (how the metadata
// service finds the caller's instance on a cache miss), for an IPv4 and an
// IPv6 address, serially and from all Ps. s must be empty; the caller
// closes it.
func BenchmarkLookupAddress(b *testing.B, s store.Store) {
	in, _ := benchInstance(b, s)
	for _, addr := range []string{"10.0.0.1", "2001:db8::1"} {
		lookup := func() error {
			uuid, err := s.LookupAddress(b.Context(), addr)
			if err == nil && uuid != in.UUID {
				err = fmt.Errorf("LookupAddress(%s) = %s, want %s", addr, uuid, in.UUID)
			}
			return err
		}
		b.Run(addr+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := lookup(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(addr+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := lookup(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
