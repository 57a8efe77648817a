package metrics

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/store"
)

// Store returns st with every failed operation counted in
// vmeta_hostctl_store_errors_total: give it to the controller (and the
// heartbeat) instead of st. Methods it does not count are passed through
// as they are.
func (m *Metrics) Store(st store.Store) store.Store {
	return &countingStore{Store: st, m: m}
}

type countingStore struct {
	store.Store
	m *Metrics
}

func (s *countingStore) Put(ctx context.Context, inst store.Instance, doc store.Document, expectRevision int64) (store.Instance, store.Document, error) {
	i, d, err := s.Store.Put(ctx, inst, doc, expectRevision)
	s.m.storeFailed(err)
	return i, d, err
}

func (s *countingStore) Instance(ctx context.Context, name string) (store.Instance, error) {
	i, err := s.Store.Instance(ctx, name)
	s.m.storeFailed(err)
	return i, err
}

func (s *countingStore) Instances(ctx context.Context) ([]store.Instance, error) {
	is, err := s.Store.Instances(ctx)
	s.m.storeFailed(err)
	return is, err
}

func (s *countingStore) Delete(ctx context.Context, name string) error {
	err := s.Store.Delete(ctx, name)
	s.m.storeFailed(err)
	return err
}

func (s *countingStore) Document(ctx context.Context, uuid string) (store.Document, error) {
	d, err := s.Store.Document(ctx, uuid)
	s.m.storeFailed(err)
	return d, err
}

func (s *countingStore) DocumentVersion(ctx context.Context, uuid string) (int64, error) {
	v, err := s.Store.DocumentVersion(ctx, uuid)
	s.m.storeFailed(err)
	return v, err
}

func (s *countingStore) LookupAddress(ctx context.Context, addr string) (string, error) {
	u, err := s.Store.LookupAddress(ctx, addr)
	s.m.storeFailed(err)
	return u, err
}

func (s *countingStore) PutSecret(ctx context.Context, instanceUUID, id string, w store.WrappedSecret) error {
	err := s.Store.PutSecret(ctx, instanceUUID, id, w)
	s.m.storeFailed(err)
	return err
}

func (s *countingStore) GetSecret(ctx context.Context, instanceUUID, id string) (store.WrappedSecret, error) {
	w, err := s.Store.GetSecret(ctx, instanceUUID, id)
	s.m.storeFailed(err)
	return w, err
}

func (s *countingStore) DeleteSecret(ctx context.Context, instanceUUID, id string) error {
	err := s.Store.DeleteSecret(ctx, instanceUUID, id)
	s.m.storeFailed(err)
	return err
}

func (s *countingStore) Record(ctx context.Context, key string) (store.Record, error) {
	r, err := s.Store.Record(ctx, key)
	s.m.storeFailed(err)
	return r, err
}

func (s *countingStore) PutRecord(ctx context.Context, key string, value []byte, expectVersion int64) (store.Record, error) {
	r, err := s.Store.PutRecord(ctx, key, value, expectVersion)
	s.m.storeFailed(err)
	return r, err
}

func (s *countingStore) DeleteRecord(ctx context.Context, key string, expectVersion int64) error {
	err := s.Store.DeleteRecord(ctx, key, expectVersion)
	s.m.storeFailed(err)
	return err
}

func (s *countingStore) Records(ctx context.Context, prefix string) ([]store.Record, error) {
	rs, err := s.Store.Records(ctx, prefix)
	s.m.storeFailed(err)
	return rs, err
}

func (s *countingStore) PutRecords(ctx context.Context, writes []store.RecordWrite) ([]store.RecordResult, error) {
	rs, err := s.Store.PutRecords(ctx, writes)
	s.m.storeFailed(err)
	return rs, err
}

// InstanceHosts passes hosts.HostCounter through when the store is one
// (counted as Instances is), else counts from Instances.
func (s *countingStore) InstanceHosts(ctx context.Context) (map[string]int, error) {
	hc, ok := s.Store.(hosts.HostCounter)
	if !ok {
		recs, err := s.Instances(ctx)
		if err != nil {
			return nil, err
		}
		counts := map[string]int{}
		for _, r := range recs {
			counts[r.Host]++
		}
		return counts, nil
	}
	counts, err := hc.InstanceHosts(ctx)
	s.m.storeFailed(err)
	return counts, err
}
