//go:build !linux

package altname

// Get, Add and Del are Linux-only.
func Get(index int) (Link, error)      { return Link{}, ErrUnsupported }
func Add(index int, name string) error { return ErrUnsupported }
func Del(index int, name string) error { return ErrUnsupported }
