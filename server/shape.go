package server

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"strings"
	"sync"
	"weak"
)

// dirShape is what every view with the same paths in a version shares:
// the paths, and per path its content type, class and, for listings that
// follow from the paths, its body. Instances alike (most of a host's)
// have one shape per version.
type dirShape struct {
	index map[string]uint16 // path below the version -> slot
	slots []slot
}

type slot struct {
	body     []byte // the body, when shared
	shared   bool
	json     bool
	password bool
	class    pathClass
}

// shapes interns dirShapes by their description (shapeKey). An entry goes
// once no view uses its shape any more.
var shapes struct {
	sync.Mutex
	m map[string]weak.Pointer[dirShape]
}

// internShape returns the shape of items (sorted by key, each once).
func internShape(items []item) *dirShape {
	key := shapeKey(items)
	shapes.Lock()
	defer shapes.Unlock()
	if s := shapes.m[key].Value(); s != nil {
		return s
	}
	s := &dirShape{index: make(map[string]uint16, len(items)), slots: make([]slot, len(items))}
	for i, it := range items {
		s.index[strings.Clone(it.key)] = uint16(i)
		s.slots[i] = it.slot
		if it.slot.shared {
			s.slots[i].body = bytes.Clone(it.body)
		}
	}
	if shapes.m == nil {
		shapes.m = map[string]weak.Pointer[dirShape]{}
	}
	shapes.m[key] = weak.Make(s)
	runtime.AddCleanup(s, forgetShape, key)
	return s
}

// forgetShape drops the entry of a shape no longer used (unless a new
// shape took its place meanwhile).
func forgetShape(key string) {
	shapes.Lock()
	defer shapes.Unlock()
	if p, ok := shapes.m[key]; ok && p.Value() == nil {
		delete(shapes.m, key)
	}
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
