//go:build !vmetacrash

package crashpoint

// Enabled reports whether this binary can crash at a step (built with the
// vmetacrash tag).
const Enabled = false

// Hit marks a step; in a production build it does nothing.
func Hit(string) {}
