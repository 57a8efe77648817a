// Package hoststest holds test doubles for the host tracking of
// hostctl/hosts: a hand-written liveness whose down hosts a test sets.
package hoststest

import (
	"context"
	"sync"
)

// Liveness is a hand-written host liveness (controller.Hosts): the hosts
// Set down are down. The zero value has every host up.
type Liveness struct {
	mu   sync.Mutex
	down map[string]bool
}

// Set marks host down or up.
func (l *Liveness) Set(host string, down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down == nil {
		l.down = map[string]bool{}
	}
	l.down[host] = down
}

// HostDown says whether host was Set down.
func (l *Liveness) HostDown(_ context.Context, host string) (bool, string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down[host] {
		return true, "silent", nil
	}
	return false, "last seen just now", nil
}
