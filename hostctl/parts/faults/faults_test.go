package faults_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// records is an in-memory faults.Records whose writes fail while failPut
// or failDelete is set.
type records struct {
	mu                  sync.Mutex
	m                   map[string][]byte
	failPut, failDelete bool
}

var errInjected = errors.New("injected: store failed")

func (r *records) Record(_ context.Context, key string) (store.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[key]
	if !ok {
		return store.Record{}, fmt.Errorf("record %s: %w", key, store.ErrNotFound)
	}
	return store.Record{Key: key, Value: v}, nil
}

func (r *records) Records(_ context.Context, prefix string) ([]store.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Record
	for _, k := range slices.Sorted(maps.Keys(r.m)) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, store.Record{Key: k, Value: r.m[k]})
		}
	}
	return out, nil
}

func (r *records) PutRecord(_ context.Context, key string, v []byte, _ int64) (store.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failPut {
		return store.Record{}, errInjected
	}
	if r.m == nil {
		r.m = map[string][]byte{}
	}
	r.m[key] = v
	return store.Record{Key: key, Value: v}, nil
}

func (r *records) DeleteRecord(_ context.Context, key string, _ int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failDelete {
		return errInjected
	}
	if _, ok := r.m[key]; !ok {
		return fmt.Errorf("record %s: %w", key, store.ErrNotFound)
	}
	delete(r.m, key)
	return nil
}

const uuid = "1B4E28BA-2FA1-11D2-883F-0016D3CCA427"

func instance() *part.Instance {
	return &part.Instance{Spec: &model.Instance{Name: "vm1", UUID: uuid}}
}

// mountFailed is the error of a start whose share could not be mounted.
func mountFailed() error {
	return fmt.Errorf("start vm1: %w", &part.MountError{Share: "share-1", Instance: "vm1", Err: errors.New("mount.nfs: access denied by server while mounting filer:/x")})
}

// TestRefusedInError: while an instance is in ERROR, a plain start and a
// soft reboot are refused (ErrState) asking for a hard reboot and saying
// why; every other operation, and every operation of an instance not in
// ERROR, passes Check.
func TestRefusedInError(t *testing.T) {
	ctx := context.Background()
	p := faults.New(&records{}, nil)
	in := instance()
	for _, op := range part.Ops() {
		if err := p.Check(ctx, op, in); err != nil {
			t.Errorf("%s, not in ERROR: %v", op, err)
		}
	}
	if err := p.StartFailed(ctx, in, mountFailed()); err != nil {
		t.Fatal(err)
	}
	for _, op := range part.Ops() {
		err := p.Check(ctx, op, in)
		if op != part.Start && op != part.RebootSoft {
			if err != nil {
				t.Errorf("%s in ERROR: %v; want no refusal", op, err)
			}
			continue
		}
		if !errors.Is(err, part.ErrState) || !strings.Contains(err.Error(), "hostctl instance reboot --hard vm1") || !strings.Contains(err.Error(), "share share-1") {
			t.Errorf("%s in ERROR: %v; want ErrState asking for a hard reboot, naming the share", op, err)
		}
		if ans := p.Answers()[op]; ans.Do != part.Refuse {
			t.Errorf("%s: the part refuses it but answers %v", op, ans.Do)
		}
	}
	if missing := p.Answers().Missing(); len(missing) != 0 {
		t.Errorf("no answer for %v", missing)
	}
}

// TestStartFailed: only a start that failed on a share mount puts the
// instance in ERROR; the fault names the share, not the mount's own
// words; a store that cannot take the record says so, and the instance
// is not in ERROR.
func TestStartFailed(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		err     error
		failPut bool
		fault   string // "" not in ERROR
		wantErr string
	}{
		{name: "libvirt start failed", err: errors.New("start vm1: qemu died")},
		{name: "mount failed", err: mountFailed(), fault: "share share-1 could not be mounted on the host"},
		{name: "mount failed, bare", err: part.ErrMountFailed, fault: "a share could not be mounted on the host"},
		{name: "mount failed, store failing", err: mountFailed(), failPut: true, wantErr: "could not be marked ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := &records{failPut: tc.failPut}
			p := faults.New(recs, nil)
			err := p.StartFailed(ctx, instance(), tc.err)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (!errors.Is(err, errInjected) || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("StartFailed: %v; want error %q", err, tc.wantErr)
			}
			got, err := p.Fault(ctx, uuid)
			if err != nil || !strings.HasPrefix(got, tc.fault) || (tc.fault == "") != (got == "") || strings.Contains(got, "access denied") {
				t.Errorf("fault %q, %v; want %q…", got, err, tc.fault)
			}
			want := 0
			if got != "" {
				want = 1
			}
			all, err := p.Faults(ctx)
			if err != nil || all[strings.ToLower(uuid)] != got || len(all) != want {
				t.Errorf("faults %v, %v; want the one of %s by its lower-case UUID", all, err, uuid)
			}
		})
	}
}

// TestClearAndDelete: a cleared fault is gone, clearing none is no
// error, a store that cannot delete says so (the fault stays), and the
// record goes with a deleted instance.
func TestClearAndDelete(t *testing.T) {
	ctx := context.Background()
	recs := &records{}
	p := faults.New(recs, nil)
	if err := p.ClearFault(ctx, uuid, "vm1"); err != nil {
		t.Errorf("clear without a fault: %v", err)
	}
	if err := p.SetFault(ctx, uuid, "vm1", "why"); err != nil {
		t.Fatal(err)
	}
	recs.failDelete = true
	if err := p.ClearFault(ctx, uuid, "vm1"); !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "clear the ERROR of vm1") {
		t.Errorf("clear, store failing: %v", err)
	}
	if got, _ := p.Fault(ctx, uuid); got != "why" {
		t.Errorf("fault after a failed clear: %q", got)
	}
	recs.failDelete = false
	if err := p.ClearFault(ctx, uuid, "vm1"); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Fault(ctx, uuid); got != "" || err != nil {
		t.Errorf("fault after clear: %q, %v", got, err)
	}
	if err := p.SetFault(ctx, uuid, "vm1", "again"); err != nil {
		t.Fatal(err)
	}
	if err := p.AfterDelete(ctx, instance()); err != nil {
		t.Fatal(err)
	}
	if rs, _ := recs.Records(ctx, faults.Prefix); len(rs) != 0 {
		t.Errorf("records left after delete: %v", rs)
	}
}

// TestWithoutRecords: over a store that keeps no records no instance is
// ever in ERROR and nothing fails.
func TestWithoutRecords(t *testing.T) {
	ctx := context.Background()
	p := faults.New(nil, nil)
	if err := p.StartFailed(ctx, instance(), mountFailed()); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Fault(ctx, uuid); got != "" || err != nil {
		t.Errorf("fault %q, %v", got, err)
	}
	if err := p.Check(ctx, part.Start, instance()); err != nil {
		t.Errorf("start: %v", err)
	}
	if err := p.ClearFault(ctx, uuid, "vm1"); err != nil {
		t.Error(err)
	}
}
