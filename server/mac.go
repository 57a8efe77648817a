package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"sync"
)

// macPools reuses keyed HMAC-SHA256 states, one pool per key: every
// proxied request checks a signature and every token-carrying request a
// token, and a fresh hmac.New per check costs more than the check.
// (hmac's Reset restores the keyed state without hashing the key again.)
var macPools struct {
	mu    sync.RWMutex
	pools map[string]*sync.Pool
}

// maxMACPools bounds how many keys' pools are kept; past it (many
// rotations) they are all dropped and rebuilt on use.
const maxMACPools = 32

// getMAC returns a reset HMAC-SHA256 state for key; give it back with
// putMAC.
func getMAC(key []byte) (hash.Hash, *sync.Pool) {
	macPools.mu.RLock()
	p := macPools.pools[string(key)]
	macPools.mu.RUnlock()
	if p == nil {
		k := string(key)
		macPools.mu.Lock()
		if p = macPools.pools[k]; p == nil {
			if macPools.pools == nil || len(macPools.pools) >= maxMACPools {
				macPools.pools = map[string]*sync.Pool{}
			}
			p = &sync.Pool{New: func() any { return hmac.New(sha256.New, []byte(k)) }}
			macPools.pools[k] = p
		}
		macPools.mu.Unlock()
	}
	h := p.Get().(hash.Hash)
	h.Reset()
	return h, p
}

func putMAC(h hash.Hash, p *sync.Pool) { p.Put(h) }
