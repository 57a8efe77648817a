package keylock

import "runtime"

func (k *Map) waiters(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.m[key]; e != nil {
		return e.refs
	}
	return 0
}

func runtimeGosched() { runtime.Gosched() }
