package keylock

import (
	"sync"
	"testing"
)

func TestSameKeySerialised(t *testing.T) {
	var k Map
	const n = 50
	counter := 0 // unsynchronised on purpose: the race detector checks the lock
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := k.Lock("web-1")
			counter++
			unlock()
		}()
	}
	wg.Wait()
	if counter != n {
		t.Fatalf("counter = %d", counter)
	}
	if k.Len() != 0 {
		t.Fatalf("%d entries left", k.Len())
	}
}

func TestDifferentKeysIndependent(t *testing.T) {
	var k Map
	unlockA := k.Lock("a")
	// b must be lockable while a is held (would deadlock otherwise).
	unlockB := k.Lock("b")
	if k.Len() != 2 {
		t.Fatalf("Len = %d", k.Len())
	}
	unlockB()
	unlockA()
	unlockA() // idempotent
	if k.Len() != 0 {
		t.Fatalf("Len = %d", k.Len())
	}
}

func TestWaiterGetsLockAfterRelease(t *testing.T) {
	var k Map
	unlock := k.Lock("x")
	acquired := make(chan struct{})
	go func() {
		u := k.Lock("x")
		close(acquired)
		u()
	}()
	// The waiter registers before blocking; wait for that event, not a duration.
	for k.waiters("x") < 2 {
		select {
		case <-acquired:
			t.Fatal("second Lock acquired while the first held it")
		default:
		}
		runtimeGosched()
	}
	unlock()
	<-acquired
}
