//go:build !linux

package guest

import "time"

// ProcessAge is not known outside Linux.
func ProcessAge() (time.Duration, bool) { return 0, false }
