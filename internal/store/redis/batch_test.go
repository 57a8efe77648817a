package redis

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// PutRecords with writes that wait for replicas, on one server and on a
// cluster (the batch is split by primary, each part followed by a WAIT on
// its own connection): with no replica to acknowledge, every applied write
// reports ErrNotDurable yet is stored; a conflicting one reports only its
// conflict.
func TestNotDurablePutRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"server", func(t *testing.T) string { return testenv.StartRedis(t) }},
		{"cluster", func(t *testing.T) string { return testenv.ClusterURL(testenv.StartRedisCluster(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openFlushed(t, tc.url(t), WithReplicas(1, 20*time.Millisecond))
			defer s.Close()
			ctx := t.Context()
			if _, err := s.PutRecord(ctx, "taken", []byte("v"), -1); !errors.Is(err, ErrNotDurable) {
				t.Fatalf("PutRecord: %v", err)
			}
			writes := []store.RecordWrite{{Key: "taken", Value: []byte("over"), ExpectVersion: 0}}
			for i := range 20 { // many slots: every node of a cluster
				writes = append(writes, store.RecordWrite{Key: fmt.Sprintf("k/%d", i), Value: []byte("v"), ExpectVersion: 0})
			}
			res, err := s.PutRecords(ctx, writes)
			if err != nil {
				t.Fatalf("PutRecords: %v", err)
			}
			if !errors.Is(res[0].Err, store.ErrConflict) || errors.Is(res[0].Err, ErrNotDurable) {
				t.Errorf("conflicting write: %v, want ErrConflict only", res[0].Err)
			}
			for i, r := range res[1:] {
				if !errors.Is(r.Err, ErrNotDurable) {
					t.Errorf("write %s: %v, want ErrNotDurable", writes[i+1].Key, r.Err)
				}
				if rec, err := s.Record(ctx, writes[i+1].Key); err != nil || rec.Version != 1 {
					t.Errorf("Record(%s) = %+v, %v; want it written", writes[i+1].Key, rec, err)
				}
			}
		})
	}
}
