package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// keyService is the keys resource over a real Engine on bolt, with
// procedures that only count (the procedures have their own tests).
type keyService struct {
	*keyrotation.Engine
	secret string
}

type countRotator struct{ n int }

func (r *countRotator) Rotate(context.Context, keyrotation.Subject, int64, int, func(keyrotation.Progress)) (keyrotation.Result, error) {
	r.n++
	one := 1
	return keyrotation.Result{Done: true, PriorKeyCount: &one}, nil
}

func (r *countRotator) Prune(_ context.Context, keep int) (int, error) { return keep, nil }

func (r *countRotator) Subjects(context.Context) ([]keyrotation.Subject, error) {
	return []keyrotation.Subject{{Class: keyrotation.Disk, InstanceUUID: "uuid-web-1", InstanceName: "web-1"}}, nil
}

func (k keyService) InstanceSubject(_ context.Context, c keyrotation.Class, name string) (keyrotation.Subject, error) {
	if name != "web-1" {
		return keyrotation.Subject{}, store.ErrNotFound
	}
	return keyrotation.Subject{Class: c, InstanceUUID: "uuid-web-1", InstanceName: name}, nil
}

func (k keyService) RevealProxySecret(context.Context) ([]byte, error) { return []byte(k.secret), nil }

func TestKeysResource(t *testing.T) {
	tt := newTestTokens(t)
	st := stores.BoltAt(t, filepath.Join(t.TempDir(), "keys.db"))
	e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.0.0"})
	kek, proxy, disk := &countRotator{}, &countRotator{}, &countRotator{}
	e.Register(keyrotation.KEK, kek)
	e.Register(keyrotation.Proxy, proxy)
	e.Register(keyrotation.Disk, disk)
	log := slog.New(slog.DiscardHandler)
	base := newTestServer(t, api.NewHandler(api.Services{Keys: keyService{Engine: e, secret: "proxy-secret-value"}}, log, tt.auth))
	admin, member := client.NewTCP(base, tt.root), client.NewTCP(base, tt.alice)
	ctx := t.Context()

	if _, err := member.Keys(ctx, ""); status(err) != http.StatusForbidden {
		t.Errorf("member list: %v, want 403", err)
	}
	if _, err := member.RevealProxySecret(ctx); status(err) != http.StatusForbidden {
		t.Errorf("member reveal: %v, want 403", err)
	}
	// Every class is listed; the token key has no procedure here.
	rs, err := admin.Keys(ctx, "")
	if err != nil || len(rs) != len(keyrotation.Classes) || rs[1].Class != string(keyrotation.Token) || rs[1].NoKeys == "" {
		t.Fatalf("list: %v %+v", err, rs)
	}

	p, err := admin.SetKeyPolicy(ctx, "kek", "", types.KeyPolicy{KeyRotationPolicy: types.KeyPolicyKeyGeneration, KeyGeneration: 2})
	if err != nil || p.KeyGeneration != 2 {
		t.Fatalf("set policy: %+v %v", p, err)
	}
	if _, err := admin.SetKeyPolicy(ctx, "kek", "", types.KeyPolicy{KeyRotationPolicy: types.KeyPolicyKeyGeneration, KeyGeneration: 1}); status(err) != http.StatusConflict {
		t.Errorf("decrease: %v, want 409", err)
	}
	for _, bad := range []struct {
		class, instance string
		p               types.KeyPolicy
	}{
		{"kek", "", types.KeyPolicy{KeyRotationPolicy: "Sometimes"}},
		{"kek", "", types.KeyPolicy{KeyRotationPolicy: types.KeyPolicyKeyGeneration, KeepPriorKeyCount: new(int)}},
		{"proxy", "", types.KeyPolicy{KeyRotationPolicy: types.KeyPolicyWithVersionUpgrade}},
		{"nonsense", "", types.KeyPolicy{}},
		{"kek", "web-1", types.KeyPolicy{}},
	} {
		if _, err := admin.SetKeyPolicy(ctx, bad.class, bad.instance, bad.p); status(err) != http.StatusBadRequest {
			t.Errorf("policy %s %q %+v: %v, want 400", bad.class, bad.instance, bad.p, err)
		}
	}
	if _, err := admin.SetKeyPolicy(ctx, "disk", "nope", types.KeyPolicy{}); status(err) != http.StatusNotFound {
		t.Errorf("unknown instance: %v, want 404", err)
	}
	if _, err := admin.SetKeyPolicy(ctx, "disk", "web-1", types.KeyPolicy{KeyRotationPolicy: types.KeyPolicyKeyGeneration, KeyGeneration: 5}); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	rs, err = admin.Keys(ctx, "disk")
	if err != nil || len(rs) != 1 || rs[0].Status.KeyGeneration != 5 || !rs[0].Complete || disk.n != 1 {
		t.Fatalf("disk after run: %+v %v (rotations %d)", rs, err, disk.n)
	}
	rot, err := admin.RotateKeys(ctx, "proxy-secret", "")
	if err != nil || rot.KeyGeneration != 1 || rot.Subjects != 1 {
		t.Fatalf("rotate proxy: %+v %v", rot, err)
	}
	if s, err := admin.PruneKeys(ctx, "proxy", 0); err != nil || *s.PriorKeyCount != 0 {
		t.Fatalf("prune: %+v %v", s, err)
	}
	if _, err := admin.PruneKeys(ctx, "kek", 0); status(err) != http.StatusBadRequest {
		t.Errorf("prune kek: %v, want 400", err)
	}
	r, err := admin.RevealProxySecret(ctx)
	if err != nil || r.Secret != "proxy-secret-value" {
		t.Fatalf("reveal: %+v %v", r, err)
	}

	// Without the service: 501.
	bare := client.NewTCP(newTestServer(t, api.NewHandler(api.Services{}, log, tt.auth)), tt.root)
	if _, err := bare.Keys(ctx, ""); status(err) != http.StatusNotImplemented {
		t.Errorf("no key service: %v, want 501", err)
	}
}
