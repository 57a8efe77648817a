// Package keylock serialises work per key: the changes of one instance
// (by name) run one at a time, different instances concurrently. Entries
// live only while someone holds or waits for them.
package keylock

import "sync"

// Map is a set of mutexes by key. The zero value is ready to use.
type Map struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int
}

// Lock locks key, waiting while another holder has it, and returns the
// unlock function (call it exactly once).
func (k *Map) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*entry{}
	}
	e := k.m[key]
	if e == nil {
		e = &entry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Unlock()
			k.mu.Lock()
			if e.refs--; e.refs == 0 {
				delete(k.m, key)
			}
			k.mu.Unlock()
		})
	}
}

// Len is the number of keys held or waited for.
func (k *Map) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}
