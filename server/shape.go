package server

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync"
)

// dirShape is what every view with the same paths in a version shares:
// the paths, and per path its content type, class and, for listings that
// follow from the paths, its body. Instances alike (most of a host's)
// have one shape per version. Immutable.
type dirShape struct {
	index map[string]uint16 // path below the version -> slot
	slots []slot
	// key is the shape's entry in its shapeTable ("" when it has none).
	key string
}

type slot struct {
	body     []byte // the body, when shared
	shared   bool
	json     bool
	password bool
	class    pathClass
}

// shapeTable interns dirShapes by their description (shapeKey), with the
// number of references views hold to each. The cache owns one: a view it
// holds takes a reference per directory it builds, and gives them back
// when the cache drops it (view.release). An entry goes with its last
// reference, so the table holds exactly the shapes of the cached views.
// The zero value is an empty table; a nil table interns nothing (every
// shape is new and private).
type shapeTable struct {
	mu sync.Mutex
	m  map[string]*shapeRef
}

type shapeRef struct {
	shape *dirShape
	refs  int
}

// intern returns the shape of items (sorted by key, each once), taking a
// reference to it.
func (t *shapeTable) intern(items []item) *dirShape {
	if t == nil {
		return newShape(items, "")
	}
	key := shapeKey(items)
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.m[key]; r != nil {
		r.refs++
		return r.shape
	}
	s := newShape(items, key)
	if t.m == nil {
		t.m = map[string]*shapeRef{}
	}
	t.m[key] = &shapeRef{shape: s, refs: 1}
	return s
}

// release gives back a reference intern returned.
func (t *shapeTable) release(s *dirShape) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.m[s.key]
	if r == nil || r.shape != s {
		return // not from this table (a caller's mistake; nothing to give back)
	}
	if r.refs--; r.refs == 0 {
		delete(t.m, s.key)
	}
}

// stats returns the number of shapes in the table and of references to
// them.
func (t *shapeTable) stats() (shapes, refs int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.m {
		refs += r.refs
	}
	return len(t.m), refs
}

// refs returns the number of references to s (0 when s is not in the
// table).
func (t *shapeTable) refs(s *dirShape) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.m[s.key]; r != nil && r.shape == s {
		return r.refs
	}
	return 0
}

// newShape makes the shape of items, copying what it keeps.
func newShape(items []item, key string) *dirShape {
	s := &dirShape{index: make(map[string]uint16, len(items)), slots: make([]slot, len(items)), key: key}
	for i, it := range items {
		s.index[strings.Clone(it.key)] = uint16(i)
		s.slots[i] = it.slot
		if it.slot.shared {
			s.slots[i].body = bytes.Clone(it.body)
		}
	}
	return s
}

// shapeKey describes items: their paths, slot attributes and shared
// bodies.
func shapeKey(items []item) string {
	var k []byte
	for _, it := range items {
		k = binary.AppendUvarint(k, uint64(len(it.key)))
		k = append(k, it.key...)
		flags := byte(it.slot.class) << 3
		if it.slot.shared {
			flags |= 1
		}
		if it.slot.json {
			flags |= 2
		}
		if it.slot.password {
			flags |= 4
		}
		k = append(k, flags)
		if it.slot.shared {
			k = binary.AppendUvarint(k, uint64(len(it.body)))
			k = append(k, it.body...)
		}
	}
	return string(k)
}
