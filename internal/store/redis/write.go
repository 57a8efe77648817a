package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/internal/check"
)

// maxLockWait bounds how long a write waits for another writer of the
// same instance before it gives up.
func (s *Store) maxLockWait() time.Duration { return 2 * s.opts.lockLease }

// errCrash wraps a hook's error.
var errCrash = errors.New("stopped by test hook")

// lockScript takes an instance's write lock and reads its record.
//
//	KEYS[1] lock, KEYS[2] instance; ARGV[1] token, ARGV[2] lease (ms).
//
// Returns {"busy"} or {"ok", name, rev, addrs} (missing fields nil).
var lockScript = goredis.NewScript(`#!lua
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {'busy'}
end
local r = redis.call('HMGET', KEYS[2], 'name', 'rev', 'addrs')
return {'ok', r[1], r[2], r[3]}
`)

// unlockScript: KEYS[1] lock; ARGV[1] token. Deletes the lock if it is
// still this writer's.
var unlockScript = goredis.NewScript(`#!lua
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// claimScript claims a name or address key for an instance.
//
//	KEYS[1] claim; ARGV[1] uuid, ARGV[2] token.
//
// Returns {"new", ""}, {"own", previous value} or {"held", value}.
var claimScript = goredis.NewScript(`#!lua
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^[^ ]*') ~= ARGV[1] then
  return {'held', v}
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2])
if v then
  return {'own', v}
end
return {'new', ''}
`)

// casScript: KEYS[1] key; ARGV[1] expected value, ARGV[2] new value ("" to
// delete). Returns 1 when it swapped.
var casScript = goredis.NewScript(`#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
`)

// releaseScript: KEYS[1] claim; ARGV[1] uuid. Deletes the claim if the
// instance owns it.
var releaseScript = goredis.NewScript(`#!lua
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^[^ ]*') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// holderScript tells whether a claim of another instance is in use.
//
//	KEYS[1] its lock, KEYS[2] its record; ARGV[1] "name" or "addr",
//	ARGV[2] the name or address.
//
// Returns "busy" (being written), "live" (the record has it) or "stale".
var holderScript = goredis.NewScript(`#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 'busy'
end
if ARGV[1] == 'name' then
  if redis.call('HGET', KEYS[2], 'name') == ARGV[2] then
    return 'live'
  end
  return 'stale'
end
local addrs = redis.call('HGET', KEYS[2], 'addrs')
if addrs then
  for _, a in ipairs(cjson.decode(addrs)) do
    if a == ARGV[2] then
      return 'live'
    end
  end
end
return 'stale'
`)

// writeScript writes an instance's record and document and publishes the
// change, if the writer still holds the lock; and unlocks when told to
// (when no address is left to release).
//
//	KEYS[1] lock, KEYS[2] instance, KEYS[3] document.
//	ARGV[1] token, ARGV[2] name, ARGV[3] uuid, ARGV[4] expected revision
//	(<0: any), ARGV[5] instance JSON, ARGV[6] document JSON, ARGV[7] addrs
//	field, ARGV[8] channel, ARGV[9] "1" to unlock.
//
// Returns {"ok", revision, version, old addrs field}, {"lock"},
// {"uuid", holder name} or {"revision", stored}.
var writeScript = goredis.NewScript(`#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'lock'}
end
local cur = redis.call('HMGET', KEYS[2], 'name', 'rev', 'addrs')
if cur[1] and cur[1] ~= ARGV[2] then
  return {'uuid', cur[1]}
end
local rev = tonumber(cur[2] or '0')
local expect = tonumber(ARGV[4])
if expect >= 0 and expect ~= rev then
  return {'revision', rev}
end
rev = redis.call('HINCRBY', KEYS[2], 'rev', 1)
redis.call('HSET', KEYS[2], 'name', ARGV[2], 'addrs', ARGV[7], 'json', ARGV[5])
local version = redis.call('HINCRBY', KEYS[3], 'version', 1)
redis.call('HSET', KEYS[3], 'json', ARGV[6])
local old = cur[3] or '[]'
redis.call('PUBLISH', ARGV[8], '{"uuid":"' .. ARGV[3] .. '","version":' .. version ..
  ',"old":' .. old .. ',"new":' .. ARGV[7] .. '}')
if ARGV[9] == '1' then
  redis.call('DEL', KEYS[1])
end
return {'ok', rev, version, old}
`)

// deleteScript deletes an instance's record, document and secrets and
// publishes the deletion, if the writer still holds the lock.
//
//	KEYS[1] lock, KEYS[2] instance, KEYS[3] document, KEYS[4] secrets.
//	ARGV[1] token, ARGV[2] name, ARGV[3] uuid, ARGV[4] channel.
//
// Returns {"ok", addrs field}, {"lock"} or {"notfound"}.
var deleteScript = goredis.NewScript(`#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'lock'}
end
local cur = redis.call('HMGET', KEYS[2], 'name', 'addrs')
if cur[1] ~= ARGV[2] then
  return {'notfound'}
end
local addrs = cur[2] or '[]'
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('PUBLISH', ARGV[4], '{"uuid":"' .. ARGV[3] .. '","version":0,"old":' .. addrs .. ',"new":[]}')
return {'ok', addrs}
`)

// record is what lockScript read of an instance's record.
type record struct {
	exists bool
	name   string
	rev    int64
	addrs  []string
}

// writer is one Put or Delete of one instance: its lock and the claims it
// made, so that it can give them back.
type writer struct {
	s        *Store
	uuid     string
	token    string
	lockedAt time.Time
	claims   []claim // in the order made
}

type claim struct {
	key  string
	prev string // "" when the key was free (or taken over)
}

// lock waits for and takes the instance's write lock and returns its
// record as it is under the lock.
func (s *Store) lock(ctx context.Context, uuid string) (*writer, record, error) {
	w := &writer{s: s, uuid: uuid, token: newToken()}
	deadline := time.Now().Add(s.maxLockWait())
	delay := 500 * time.Microsecond
	for {
		start := time.Now()
		res, err := lockScript.Run(ctx, s.rdb, []string{lockKey(uuid), instKey(uuid)},
			w.token, s.opts.lockLease.Milliseconds()).Slice()
		if err != nil {
			return nil, record{}, fmt.Errorf("lock instance: %w", err)
		}
		if str(res, 0) == "ok" {
			w.lockedAt = start
			var rec record
			rec.name = str(res, 1)
			rec.exists = rec.name != ""
			if r := str(res, 2); r != "" {
				if rec.rev, err = strconv.ParseInt(r, 10, 64); err != nil {
					return w, rec, fmt.Errorf("decode revision: %w", err)
				}
			}
			if rec.addrs, err = decodeAddrs(str(res, 3)); err != nil {
				return w, rec, fmt.Errorf("decode stored addresses: %w", err)
			}
			return w, rec, nil
		}
		if time.Now().After(deadline) {
			return nil, record{}, fmt.Errorf("instance %s is locked by another writer (waited %s)", uuid, s.maxLockWait())
		}
		// Jittered, growing waits: writers of one instance take turns.
		d := delay/2 + time.Duration(rand.Int64N(int64(delay)))
		if !sleep(ctx, d) {
			return nil, record{}, ctx.Err()
		}
		delay = min(2*delay, 8*time.Millisecond)
	}
}

// fresh reports whether the lock is surely still held: taken less than
// half a lease ago (by the local clock, started before the lock was
// requested, so the server's expiry is later still).
func (w *writer) fresh() bool { return time.Since(w.lockedAt) < w.s.opts.lockLease/2 }

// cleanupCtx is for giving back claims and the lock even when the caller's
// context has ended.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// unlock releases the lock (if it is still this writer's).
func (w *writer) unlock(ctx context.Context) {
	ctx, cancel := cleanupCtx(ctx)
	defer cancel()
	_ = unlockScript.Run(ctx, w.s.rdb, []string{lockKey(w.uuid)}, w.token).Err()
}

// abort gives back the claims this writer made, newest first, and unlocks.
// Errors are ignored: what cannot be given back is left as a claim the
// instance's record does not list, which lookups ignore and other
// instances can take over.
func (w *writer) abort(ctx context.Context) {
	ctx2, cancel := cleanupCtx(ctx)
	defer cancel()
	mine := claimValue(w.uuid, w.token)
	for _, c := range slices.Backward(w.claims) {
		_ = casScript.Run(ctx2, w.s.rdb, []string{c.key}, mine, c.prev).Err()
	}
	w.unlock(ctx)
}

// claim claims key (a name, what = "name", or an address, what = "addr",
// whose value is value) for the writer's instance; a conflict is returned
// as conflict(holder name).
func (w *writer) claim(ctx context.Context, key, what, value string, conflict func(holder string) error) error {
	for attempt := range 8 {
		var res []any
		err := w.s.commitShard(ctx, key, func(c writeConn) (bool, error) {
			var err error
			res, err = claimScript.Run(ctx, c, []string{key}, w.uuid, w.token).Slice()
			return err == nil && str(res, 0) != "held", err
		})
		if errors.Is(err, ErrNotDurable) {
			// Claimed, perhaps not for long: give it back.
			w.claims = append(w.claims, claim{key: key, prev: str(res, 1)})
			return fmt.Errorf("claim %s %s: %w", what, value, err)
		}
		if err != nil {
			return fmt.Errorf("claim %s %s: %w", what, value, err)
		}
		switch str(res, 0) {
		case "new":
			w.claims = append(w.claims, claim{key: key})
			return nil
		case "own":
			w.claims = append(w.claims, claim{key: key, prev: str(res, 1)})
			return nil
		case "held":
		default:
			return fmt.Errorf("claim script: unexpected reply %v", res)
		}
		held := str(res, 1)
		owner := claimOwner(held)
		state, err := holderScript.Run(ctx, w.s.rdb, []string{lockKey(owner), instKey(owner)}, what, value).Text()
		if err != nil {
			return fmt.Errorf("check holder of %s %s: %w", what, value, err)
		}
		if state != "stale" {
			return conflict(w.s.holderName(ctx, owner))
		}
		// Left over by a writer that died: take it over, unless it changed
		// since it was read (then look again).
		var swapped int
		err = w.s.commitShard(ctx, key, func(c writeConn) (bool, error) {
			var err error
			swapped, err = casScript.Run(ctx, c, []string{key}, held, claimValue(w.uuid, w.token)).Int()
			return swapped == 1, err
		})
		if errors.Is(err, ErrNotDurable) {
			w.claims = append(w.claims, claim{key: key})
			return fmt.Errorf("take over %s %s: %w", what, value, err)
		}
		if err != nil {
			return fmt.Errorf("take over %s %s: %w", what, value, err)
		}
		if swapped == 1 {
			w.claims = append(w.claims, claim{key: key})
			return nil
		}
		if !sleep(ctx, time.Duration(attempt+1)*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("%s %s kept changing hands", what, value)
}

// release deletes the claims on keys that the instance owns, as long as
// the lock is surely still held: under the lock no other writer of the
// instance can want them. A writer that is late leaves them, as a crash
// would (lookups ignore such claims; others take them over).
func (w *writer) release(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if !w.fresh() {
			return fmt.Errorf("release %s: lock may have expired", k)
		}
		if err := releaseScript.Run(ctx, w.s.rdb, []string{k}, w.uuid).Err(); err != nil {
			return fmt.Errorf("release %s: %w", k, err)
		}
	}
	return nil
}

// holderName returns the name of the instance with the given UUID, for an
// error message; the UUID itself when the name cannot be read.
func (s *Store) holderName(ctx context.Context, uuid string) string {
	name, err := s.rdb.HGet(ctx, instKey(uuid), "name").Result()
	if err != nil || name == "" {
		return uuid
	}
	return name
}

// Put implements store.Store: see the package comment for the steps.
func (s *Store) Put(ctx context.Context, inst store.Instance, doc store.Document, expectRevision int64) (store.Instance, store.Document, error) {
	inst, doc, err := check.Put(inst, doc)
	if err != nil {
		return store.Instance{}, store.Document{}, err
	}
	inst, doc, err = s.put(ctx, inst, doc, expectRevision)
	if err != nil {
		return store.Instance{}, store.Document{}, fmt.Errorf("put instance %s: %w", inst.Name, err)
	}
	return inst, doc, nil
}

func (s *Store) put(ctx context.Context, inst store.Instance, doc store.Document, expectRevision int64) (store.Instance, store.Document, error) {
	if err := ctx.Err(); err != nil {
		return inst, doc, err
	}
	instJSON, err := json.Marshal(inst)
	if err != nil {
		return inst, doc, fmt.Errorf("encode record: %w", err)
	}
	docJSON, err := json.Marshal(doc)
	if err != nil {
		return inst, doc, fmt.Errorf("encode document: %w", err)
	}

	w, rec, err := s.lock(ctx, inst.UUID)
	if err != nil {
		if w != nil {
			w.unlock(ctx)
		}
		return inst, doc, err
	}
	crashed, written := false, false
	defer func() {
		if !crashed && !written {
			w.abort(ctx)
		}
	}()

	// Checks that need no claim; the write script repeats them.
	if rec.exists && rec.name != inst.Name {
		return inst, doc, check.UUIDHeld(inst.UUID, rec.name)
	}
	if expectRevision >= 0 && expectRevision != rec.rev {
		return inst, doc, check.Revision(expectRevision, rec.rev)
	}

	if err := w.claimAll(ctx, inst, rec); err != nil {
		return inst, doc, err
	}
	if hook := s.opts.hook(func(h *hooks) func() error { return h.afterClaim }); hook != nil {
		if err := hook(); err != nil {
			crashed = true
			return inst, doc, fmt.Errorf("after claims: %w: %w", errCrash, err)
		}
	}

	var gone []string
	for _, a := range rec.addrs {
		if !slices.Contains(inst.Addresses, a) {
			gone = append(gone, addrKey(a))
		}
	}
	unlock := "0"
	if len(gone) == 0 {
		unlock = "1" // nothing to release after the write: unlock in the script
	}
	var res []any
	err = s.commit(ctx, instKey(inst.UUID), func(c writeConn) (bool, error) {
		var err error
		res, err = writeScript.Run(ctx, c, []string{lockKey(inst.UUID), instKey(inst.UUID), docKey(inst.UUID)},
			w.token, inst.Name, inst.UUID, expectRevision, instJSON, docJSON, encodeAddrs(inst.Addresses),
			changesChannel, unlock).Slice()
		return err == nil && str(res, 0) == "ok", err
	})
	// Written, but perhaps not yet on enough replicas: finish the steps,
	// then report it.
	var notDurable error
	if errors.Is(err, ErrNotDurable) {
		notDurable, err = err, nil
	}
	if err != nil {
		// The script may or may not have run: leave the claims (a retry
		// or a later writer sorts them out) but free the lock.
		crashed = true
		w.unlock(ctx)
		return inst, doc, fmt.Errorf("run write script: %w", err)
	}
	switch str(res, 0) {
	case "ok":
		written = true
	case "lock":
		return inst, doc, fmt.Errorf("lost the write lock (a step took longer than %s)", s.opts.lockLease)
	case "uuid":
		return inst, doc, check.UUIDHeld(inst.UUID, str(res, 1))
	case "revision":
		stored, _ := res[1].(int64)
		return inst, doc, check.Revision(expectRevision, stored)
	default:
		return inst, doc, fmt.Errorf("write script: unexpected reply %v", res)
	}
	inst.Revision, _ = res[1].(int64)
	doc.Version, _ = res[2].(int64)

	if hook := s.opts.hook(func(h *hooks) func() error { return h.afterWrite }); hook != nil {
		if err := hook(); err != nil {
			crashed = true
			return inst, doc, fmt.Errorf("after write: %w: %w", errCrash, err)
		}
	}
	if len(gone) == 0 {
		return inst, doc, notDurable // unlocked by the script
	}
	// Committed: from here on errors leave claims the record does not
	// list, which lookups ignore; they do not fail the Put.
	ctx2, cancel := cleanupCtx(ctx)
	defer cancel()
	_ = w.release(ctx2, gone)
	w.unlock(ctx)
	return inst, doc, notDurable
}

// claimAll claims the instance's name and then its addresses in sorted
// order (so that two writers wanting the same addresses cannot each take
// one and refuse the other). What the record already has and the instance
// still owns needs no new claim: no other writer can take it over while
// the record lists it. One pipelined read checks those.
func (w *writer) claimAll(ctx context.Context, inst store.Instance, rec record) error {
	type want struct {
		key, what, value string
		conflict         func(holder string) error
		kept             bool
	}
	wants := []want{{
		key: nameKey(inst.Name), what: "name", value: inst.Name, kept: rec.name == inst.Name,
		conflict: func(holder string) error { return check.NameHeld(inst.Name, holder) },
	}}
	for _, a := range slices.Sorted(slices.Values(inst.Addresses)) {
		wants = append(wants, want{
			key: addrKey(a), what: "addr", value: a, kept: slices.Contains(rec.addrs, a),
			conflict: func(holder string) error { return check.AddrHeld(a, holder) },
		})
	}
	held := make([]*goredis.StringCmd, len(wants))
	if _, err := w.s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, x := range wants {
			if x.kept {
				held[i] = p.Get(ctx, x.key)
			}
		}
		return nil
	}); err != nil && !errors.Is(err, goredis.Nil) {
		return fmt.Errorf("read claims: %w", err)
	}
	for i, x := range wants {
		if held[i] != nil && claimOwner(held[i].Val()) == w.uuid {
			continue
		}
		if err := w.claim(ctx, x.key, x.what, x.value, x.conflict); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.delete(ctx, name); err != nil {
		return fmt.Errorf("delete instance %s: %w", name, err)
	}
	return nil
}

func (s *Store) delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	held, err := s.rdb.Get(ctx, nameKey(name)).Result()
	if errors.Is(err, goredis.Nil) {
		return store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("read name claim: %w", err)
	}
	uuid := claimOwner(held)
	w, rec, err := s.lock(ctx, uuid)
	if err != nil {
		if w != nil {
			w.unlock(ctx)
		}
		return err
	}
	defer w.unlock(ctx)
	if !rec.exists || rec.name != name {
		// A claim left over by a writer that died before its record was
		// written: tidy it up (if it is still the same one).
		ctx2, cancel := cleanupCtx(ctx)
		defer cancel()
		_ = casScript.Run(ctx2, s.rdb, []string{nameKey(name)}, held, "").Err()
		return store.ErrNotFound
	}
	var res []any
	err = s.commit(ctx, instKey(uuid), func(c writeConn) (bool, error) {
		var err error
		res, err = deleteScript.Run(ctx, c, []string{lockKey(uuid), instKey(uuid), docKey(uuid), secretKey(uuid)},
			w.token, name, uuid, changesChannel).Slice()
		return err == nil && str(res, 0) == "ok", err
	})
	var notDurable error
	if errors.Is(err, ErrNotDurable) {
		notDurable, err = err, nil
	}
	if err != nil {
		return fmt.Errorf("run delete script: %w", err)
	}
	switch str(res, 0) {
	case "ok":
	case "notfound":
		return store.ErrNotFound
	case "lock":
		return fmt.Errorf("lost the write lock (a step took longer than %s)", s.opts.lockLease)
	default:
		return fmt.Errorf("delete script: unexpected reply %v", res)
	}
	addrs, _ := decodeAddrs(str(res, 1))
	keys := []string{nameKey(name)}
	for _, a := range addrs {
		keys = append(keys, addrKey(a))
	}
	ctx2, cancel := cleanupCtx(ctx)
	defer cancel()
	// Deleted: claims that cannot be released now are ignored by lookups
	// and taken over by whoever wants them.
	_ = w.release(ctx2, keys)
	return notDurable
}

func str(res []any, i int) string {
	if i < len(res) {
		if s, ok := res[i].(string); ok {
			return s
		}
	}
	return ""
}
