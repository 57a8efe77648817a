package images

import "sync"

// useLocks are per-image reader/writer locks: an apply using an image
// holds its read side from the moment it looks the image up until its
// instance record names it, and Delete holds the write side while it
// checks that no instance uses the image and removes it. So an image is
// never deleted under an apply that is about to use it.
type useLocks struct {
	mu sync.Mutex
	m  map[string]*useEntry
}

type useEntry struct {
	rw   sync.RWMutex
	refs int
}

func (u *useLocks) entry(name string) *useEntry {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]*useEntry{}
	}
	e := u.m[name]
	if e == nil {
		e = &useEntry{}
		u.m[name] = e
	}
	e.refs++
	return e
}

func (u *useLocks) drop(name string, e *useEntry) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(u.m, name)
	}
}

// Use marks the image name in use until release is called (many users
// at once); Delete of that image waits for every release.
func (d *Dir) Use(name string) (release func()) {
	e := d.use.entry(name)
	e.rw.RLock()
	return func() {
		e.rw.RUnlock()
		d.use.drop(name, e)
	}
}

// exclusive waits until no one uses the image and keeps others from
// starting to, until release is called.
func (d *Dir) exclusive(name string) (release func()) {
	e := d.use.entry(name)
	e.rw.Lock()
	return func() {
		e.rw.Unlock()
		d.use.drop(name, e)
	}
}
