package diskrotate

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestDiskRotateRefusals: bad arguments are refused naming the field,
// value and rule, before anything changes.
func TestDiskRotateRefusals(t *testing.T) {
	t.Parallel()
	f := newFakeFixture(t)
	ctx := context.Background()
	r := f.rotator()
	good := f.subject()
	for _, tc := range []struct {
		name string
		s    keyrotation.Subject
		gen  int64
		keep int
		want string
	}{
		{"keep", good, 2, 1, "keepPriorKeyCount 1: disk passphrases rotate in place"},
		{"gen", good, 0, 0, "keyGeneration 0: must be at least 1"},
		{"class", keyrotation.Subject{Class: keyrotation.Proxy}, 2, 0, "not an instance's disk passphrases"},
		{"missing", keyrotation.Subject{Class: keyrotation.Disk, InstanceName: "nope"}, 2, 0, "not found"},
		{"uuid", keyrotation.Subject{Class: keyrotation.Disk, InstanceName: f.name, InstanceUUID: "00000000-0000-4000-8000-000000000000"}, 2, 0, "not 00000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Rotate(ctx, tc.s, tc.gen, tc.keep, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	for _, d := range f.disks {
		if bd := f.record(d); bd.KeyGeneration != 0 || bd.KeyRotation != nil {
			t.Fatalf("a refused rotation changed %s: %+v", d, bd)
		}
	}
	if err := New(nil, nil, nil, nil, nil, nil).Recover(ctx); !errors.Is(err, ErrNoRotation) {
		t.Fatalf("Recover without a key manager = %v", err)
	}
}

// TestDiskRotateRecoverNeither: when neither the current nor the pending
// passphrase opens a disk (here: its image replaced by one under another
// passphrase), recovery reports it and changes or deletes nothing.
func TestDiskRotateRecoverNeither(t *testing.T) {
	t.Parallel()
	f := newFakeFixture(t)
	ctx := context.Background()
	r := f.rotator()
	id := f.secret["vdb"]
	if _, err := f.km.SetPending(ctx, id); err != nil {
		t.Fatal(err)
	}
	bd := f.record("vdb")
	bd.KeyRotation = &encryption.DiskKeyRotation{Generation: 2, Slot: 1}
	in, _, err := r.instanceDisks(ctx, f.subject())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.core.SetBlockDevice(ctx, in, bd); err != nil {
		t.Fatal(err)
	}
	p := f.path("vdb")
	f.luks.create(p, []byte("someone else's"), nil)
	curBefore, _ := f.km.Passphrase(ctx, id)
	err = r.Recover(ctx)
	if err == nil || !strings.Contains(err.Error(), "neither the current nor the pending passphrase opens it") || !strings.Contains(err.Error(), "vdb") {
		t.Fatalf("Recover = %v", err)
	}
	if ok, _ := f.km.HasPending(ctx, id); !ok {
		t.Fatal("recovery dropped the pending passphrase")
	}
	if now, _ := f.km.Passphrase(ctx, id); !bytes.Equal(now, curBefore) {
		t.Fatal("recovery changed the current passphrase")
	}
	if s, _ := f.luks.KeySlots(ctx, p); !s[0] || s[1] {
		t.Fatalf("recovery changed the key slots: %v", s)
	}
	if f.record("vdb").KeyRotation == nil {
		t.Fatal("recovery dropped the journal")
	}
	// vda was not touched and still opens.
	pass, _ := f.km.Passphrase(ctx, f.secret["vda"])
	if err := f.luks.Verify(ctx, f.path("vda"), pass, nil); err != nil {
		t.Fatal(err)
	}
}

// TestDiskRotateRewritesBadSlot: the journal's key slot is active but
// does not hold the pending passphrase (an amend cut short); recovery
// proves the current passphrase opens the disk, rewrites the slot and
// finishes the rotation.
func TestDiskRotateRewritesBadSlot(t *testing.T) {
	t.Parallel()
	f := newFakeFixture(t)
	ctx := context.Background()
	r := f.rotator()
	id := f.secret["vdb"]
	cur, _ := f.km.Passphrase(ctx, id)
	pending, err := f.km.SetPending(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	in, _, err := r.instanceDisks(ctx, f.subject())
	if err != nil {
		t.Fatal(err)
	}
	bd := f.record("vdb")
	bd.KeyRotation = &encryption.DiskKeyRotation{Generation: 2, Slot: 3}
	if err := f.core.SetBlockDevice(ctx, in, bd); err != nil {
		t.Fatal(err)
	}
	if err := f.luks.AddKeySlot(ctx, f.path("vdb"), 3, cur, []byte("not the pending one"), nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if now, _ := f.km.Passphrase(ctx, id); !bytes.Equal(now, pending) {
		t.Fatal("the pending passphrase was not made current")
	}
	if bd := f.record("vdb"); bd.KeyGeneration != 2 || bd.KeyRotation != nil || bd.KeySlot == nil || *bd.KeySlot != 3 {
		t.Fatalf("record after recovery: %+v", bd)
	}
	if s, _ := f.luks.KeySlots(ctx, f.path("vdb")); s[0] || !s[3] {
		t.Fatalf("key slots %v, want only 3", s)
	}
	if err := f.luks.Verify(ctx, f.path("vdb"), pending, nil); err != nil {
		t.Fatal(err)
	}
}

// TestDiskRotateLogsNoSecret: a rotation (and a recovery) logged at
// debug level names disks, secrets' UUIDs and key slots, never a
// passphrase, old or new.
func TestDiskRotateLogsNoSecret(t *testing.T) {
	t.Parallel()
	f := newFakeFixture(t)
	ctx := context.Background()
	var logBuf testenv.SyncBuffer
	r := New(f.core, f.core, f.core, f.km, f.luks, slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	var secrets [][]byte
	for _, d := range f.disks {
		p, _ := f.km.Passphrase(ctx, f.secret[d])
		secrets = append(secrets, p)
	}
	// A torn slot, so that the recovery logs too.
	id := f.secret["vdb"]
	if _, err := f.km.SetPending(ctx, id); err != nil {
		t.Fatal(err)
	}
	in, _, err := r.instanceDisks(ctx, f.subject())
	if err != nil {
		t.Fatal(err)
	}
	bd := f.record("vdb")
	bd.KeyRotation = &encryption.DiskKeyRotation{Generation: 1, Slot: 2}
	if err := f.core.SetBlockDevice(ctx, in, bd); err != nil {
		t.Fatal(err)
	}
	f.luks.setSlot(f.path("vdb"), 2, []byte("torn"))
	if err := r.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range f.disks {
		p, _ := f.km.Passphrase(ctx, f.secret[d])
		secrets = append(secrets, p)
	}
	if res, err := r.Rotate(ctx, f.subject(), 2, 0, nil); err != nil || !res.Done {
		t.Fatalf("Rotate = %+v, %v", res, err)
	}
	for _, d := range f.disks {
		p, _ := f.km.Passphrase(ctx, f.secret[d])
		secrets = append(secrets, p)
	}
	logs := logBuf.String()
	for _, want := range []string{"disk passphrase rotated", "rewriting it", "interrupted; finishing it"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("no %q logged:\n%s", want, logs)
		}
	}
	for _, s := range secrets {
		if strings.Contains(logs, string(s)) {
			t.Fatal("a passphrase is in the log")
		}
	}
}

// TestDiskRotateEngine: the rotator registered in the
// keyrotation.Engine (as the daemon wires it): a KeyGeneration policy on
// the disk class rotates the stopped instance's disks and the status
// reaches the generation; a running instance's status says pending and
// keeps its generation until a run after the stop.
func TestDiskRotateEngine(t *testing.T) {
	t.Parallel()
	f := newFakeFixture(t)
	ctx := context.Background()
	e := keyrotation.New(f.st, keyrotation.Options{Host: "local", Version: "v1.0.0"})
	e.Register(keyrotation.Disk, f.rotator())
	if err := e.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	s := f.subject()
	if _, err := e.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.Disk}, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := e.Status(ctx, s)
	if err != nil || st.KeyGeneration != 2 || st.Pending != "" || st.Error != "" {
		t.Fatalf("status after the run = %+v, %v", st, err)
	}
	if bad := f.check(2); len(bad) > 0 {
		t.Fatal(strings.Join(bad, "; "))
	}
	f.core.setRunning(f.name, true)
	if _, err := e.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.Disk}, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 3}); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := e.Status(ctx, s); err != nil || st.KeyGeneration != 2 || st.Pending != PendingRunning {
		t.Fatalf("status of the running instance = %+v, %v", st, err)
	}
	f.core.setRunning(f.name, false)
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := e.Status(ctx, s); err != nil || st.KeyGeneration != 3 || st.Pending != "" {
		t.Fatalf("status after the stop = %+v, %v", st, err)
	}
	if bad := f.check(3); len(bad) > 0 {
		t.Fatal(strings.Join(bad, "; "))
	}
}

// TestInstanceExistsReadsTheStore: the key rotation engine's question —
// is an instance with this UUID in the store, on any host — is answered
// from the store's instance records (any letter case), and refused
// without them.
func TestInstanceExistsReadsTheStore(t *testing.T) {
	f := newFakeFixture(t)
	ctx := context.Background()
	r := f.rotator()
	for _, tc := range []struct {
		uuid string
		want bool
	}{
		{f.uuid, true},
		{strings.ToUpper(f.uuid), true},
		{"00000000-0000-4000-8000-000000000000", false},
	} {
		if got, err := r.InstanceExists(ctx, tc.uuid); err != nil || got != tc.want {
			t.Errorf("InstanceExists(%s) = %t, %v; want %t", tc.uuid, got, err, tc.want)
		}
	}
	if _, err := New(f.core, nil, f.core, f.km, f.luks, nil).InstanceExists(ctx, f.uuid); !errors.Is(err, ErrNoRotation) {
		t.Errorf("InstanceExists without the store's records = %v, want ErrNoRotation", err)
	}
}
