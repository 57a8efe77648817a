package logbudget

import (
	"fmt"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestBudgetPerPeer(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	b := New(3, time.Second, c.now)
	written := 0
	for range 2000 {
		if ok, _ := b.Allow("10.0.0.1"); ok {
			written++
		}
	}
	if written != 3 {
		t.Fatalf("2,000 refusals from one peer wrote %d lines, want the burst of 3", written)
	}
	// Another peer has its own budget.
	if ok, _ := b.Allow("10.0.0.2"); !ok {
		t.Fatal("a second peer was refused by the first one's budget")
	}
	// One interval later one line more, saying how many were dropped.
	c.t = c.t.Add(time.Second)
	ok, suppressed := b.Allow("10.0.0.1")
	if !ok || suppressed != 1997 {
		t.Fatalf("after an interval: Allow = %v, suppressed %d; want true, 1997", ok, suppressed)
	}
	if ok, _ := b.Allow("10.0.0.1"); ok {
		t.Fatal("the budget refilled by more than one line per interval")
	}
}

func TestBudgetManyPeersBounded(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	b := New(1, time.Hour, c.now)
	written := 0
	for i := range 3 * MaxPeers {
		for range 3 {
			if ok, _ := b.Allow(fmt.Sprintf("peer-%d", i)); ok {
				written++
			}
		}
	}
	// MaxPeers peers get their line, every later one shares one budget.
	if want := MaxPeers + 1; written != want {
		t.Fatalf("%d peers wrote %d lines, want %d", 3*MaxPeers, written, want)
	}
	if n := len(b.peers); n > MaxPeers+1 {
		t.Fatalf("%d peers tracked, want at most %d", n, MaxPeers+1)
	}
}
