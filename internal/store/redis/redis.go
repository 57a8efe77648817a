// Package redis is the shared store backend: state in a Redis server, so that
// many hosts and any number of metadata-service replicas see the same
// instances and documents. It needs Redis 7.0 or newer (the write scripts
// carry a "#!lua" shebang so Redis refuses them up front when out of memory
// instead of failing half-way).
//
// # Keys
//
// Every key starts with "vmeta:". The keys of one instance carry its UUID as
// a {hash tag}, so they share one Redis Cluster hash slot:
//
//	vmeta:inst:{<uuid>}    hash  name, rev, addrs (JSON list), json (store.Instance)
//	vmeta:doc:{<uuid>}     hash  version, json (store.Document)
//	vmeta:secret:{<uuid>}  hash  <secret id> -> JSON store.WrappedSecret
//
// and three indexes span all instances:
//
//	vmeta:names            hash  <name> -> <uuid>   (name lookup and listing)
//	vmeta:addr:<addr>      string <uuid>            (one per canonical address)
//
// Revision and version live in their own hash fields (not in the JSON, where
// they are stored as 0) so that the scripts can bump them without decoding
// JSON, and DocumentVersion reads one small field.
//
// # Writes
//
// Put and Delete are Lua scripts that make every check (name and UUID
// ownership, expected revision, address ownership) before they write, so a
// refused call changes nothing; Redis runs a script in isolation. Every key a
// script touches is passed in KEYS: the addresses to release are read just
// before (the instance's addrs field) and the script refuses with "stale",
// and the call is retried, when that field changed in between.
//
// # Redis Cluster
//
// This backend talks to one Redis node (or a primary with replicas). A Put
// touches the instance's slot and the index keys, which live in other slots,
// so it cannot run as one script in a cluster as laid out here. Cluster
// support (a later change) needs either every key under one hash tag (one
// slot, one primary: simple and still atomic) or index updates outside the
// script with repair; the per-instance tags above are kept so that the
// second option stays open.
package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/internal/check"
)

const prefix = "vmeta:"

func namesKey() string             { return prefix + "names" }
func instKey(uuid string) string   { return prefix + "inst:{" + uuid + "}" }
func docKey(uuid string) string    { return prefix + "doc:{" + uuid + "}" }
func secretKey(uuid string) string { return prefix + "secret:{" + uuid + "}" }
func addrKey(addr string) string   { return prefix + "addr:" + addr }

// maxAttempts bounds the retries of a write whose pre-read went stale (the
// instance's addresses changed between the read and the script).
const maxAttempts = 32

// putScript: see the package comment.
//
//	KEYS[1] names, KEYS[2] instance, KEYS[3] document,
//	KEYS[4 .. 3+n] addresses to claim, KEYS[4+n ..] addresses to release.
//	ARGV[1] name, ARGV[2] uuid, ARGV[3] expected revision (<0: any),
//	ARGV[4] instance JSON, ARGV[5] document JSON, ARGV[6] new addrs field,
//	ARGV[7] addrs field as read before the call, ARGV[8] n.
//
// Returns {"ok", revision, version}, {"stale"}, {"name", holder uuid},
// {"uuid", holder name}, {"revision", stored} or {"address", i, owner uuid}.
var putScript = goredis.NewScript(`#!lua
local names, inst, doc = KEYS[1], KEYS[2], KEYS[3]
local name, uuid, expect = ARGV[1], ARGV[2], tonumber(ARGV[3])
local n = tonumber(ARGV[8])
if (redis.call('HGET', inst, 'addrs') or '') ~= ARGV[7] then
  return {'stale'}
end
local holder = redis.call('HGET', names, name)
if holder and holder ~= uuid then
  return {'name', holder}
end
local current = redis.call('HGET', inst, 'name')
if current and current ~= name then
  return {'uuid', current}
end
local rev = tonumber(redis.call('HGET', inst, 'rev') or '0')
if expect >= 0 and expect ~= rev then
  return {'revision', rev}
end
for i = 4, 3 + n do
  local owner = redis.call('GET', KEYS[i])
  if owner and owner ~= uuid then
    return {'address', i - 3, owner}
  end
end
for i = 4 + n, #KEYS do
  if redis.call('GET', KEYS[i]) == uuid then
    redis.call('DEL', KEYS[i])
  end
end
for i = 4, 3 + n do
  redis.call('SET', KEYS[i], uuid)
end
rev = redis.call('HINCRBY', inst, 'rev', 1)
redis.call('HSET', inst, 'name', name, 'addrs', ARGV[6], 'json', ARGV[4])
local version = redis.call('HINCRBY', doc, 'version', 1)
redis.call('HSET', doc, 'json', ARGV[5])
redis.call('HSET', names, name, uuid)
return {'ok', rev, version}
`)

// deleteScript:
//
//	KEYS[1] names, KEYS[2] instance, KEYS[3] document, KEYS[4] secrets,
//	KEYS[5 ..] the instance's addresses.
//	ARGV[1] name, ARGV[2] uuid, ARGV[3] addrs field as read before the call.
//
// Returns "ok", "notfound" or "stale".
var deleteScript = goredis.NewScript(`#!lua
local holder = redis.call('HGET', KEYS[1], ARGV[1])
if not holder then
  return 'notfound'
end
if holder ~= ARGV[2] or (redis.call('HGET', KEYS[2], 'addrs') or '') ~= ARGV[3] then
  return 'stale'
end
for i = 5, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[2] then
    redis.call('DEL', KEYS[i])
  end
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('HDEL', KEYS[1], ARGV[1])
return 'ok'
`)

// Store is a store.Store kept in Redis.
type Store struct {
	rdb  *goredis.Client
	addr string
}

var _ store.Store = (*Store)(nil)

// Open connects to the Redis server named by rawURL,
// redis://[user:password@]host:port/db (rediss:// for TLS; unix:// and the
// query options of go-redis's ParseURL work too), and checks that it answers.
// Errors name the server's address, never the password.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	opts, err := parseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open redis store: %w", err)
	}
	// Maintenance notifications are a Redis Cloud/Enterprise feature; the
	// default "auto" mode probes for them on every new connection.
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	rdb := goredis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("open redis store at %s (db %d): %w", opts.Addr, opts.DB, scrub(err, opts.Password))
	}
	return &Store{rdb: rdb, addr: opts.Addr}, nil
}

// parseURL is goredis.ParseURL with errors that never contain the password
// (net/url's errors quote the whole URL).
func parseURL(rawURL string) (*goredis.Options, error) {
	safe := redactURL(rawURL)
	if !strings.Contains(rawURL, "://") {
		return nil, fmt.Errorf("invalid URL %s: no scheme (want redis://[user:password@]host:port/db)", safe)
	}
	if _, err := url.Parse(rawURL); err != nil {
		if _, err := url.Parse(safe); err != nil {
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err
			}
			return nil, fmt.Errorf("invalid URL %s: %w", safe, err)
		}
		return nil, fmt.Errorf("invalid URL %s: malformed user or password", safe)
	}
	opts, err := goredis.ParseURL(rawURL)
	if err != nil {
		_, password := userinfo(rawURL)
		return nil, fmt.Errorf("invalid URL %s: %w", safe, scrub(err, password))
	}
	return opts, nil
}

// redactURL replaces the user-info part of a URL, if any, with "xxxxx".
func redactURL(rawURL string) string {
	i := strings.Index(rawURL, "://")
	if i < 0 {
		return rawURL
	}
	rest := rawURL[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return rawURL
	}
	return rawURL[:i+3] + "xxxxx" + rest[at:]
}

// userinfo returns the user and (still escaped) password of a URL.
func userinfo(rawURL string) (user, password string) {
	i := strings.Index(rawURL, "://")
	if i < 0 {
		return "", ""
	}
	rest := rawURL[i+3:]
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return "", ""
	}
	user, password, _ = strings.Cut(rest[:at], ":")
	return user, password
}

// scrub returns err, or a copy of its text with secret masked if it
// contains secret (the copy no longer wraps err).
func scrub(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), secret, "xxxxx"))
}

// Addr returns the address of the Redis server.
func (s *Store) Addr() string { return s.addr }

// Close closes the connections to Redis.
func (s *Store) Close() error {
	if err := s.rdb.Close(); err != nil {
		return fmt.Errorf("close redis store %s: %w", s.addr, err)
	}
	return nil
}

// Put implements store.Store.
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
	addrsField := encodeAddrs(inst.Addresses)
	ik := instKey(inst.UUID)

	for attempt := range maxAttempts {
		if err := backoff(ctx, attempt); err != nil {
			return inst, doc, err
		}
		before, err := s.rdb.HGet(ctx, ik, "addrs").Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return inst, doc, fmt.Errorf("read record: %w", err)
		}
		old, err := decodeAddrs(before)
		if err != nil {
			return inst, doc, fmt.Errorf("decode stored addresses: %w", err)
		}
		keys := make([]string, 0, 3+len(inst.Addresses)+len(old))
		keys = append(keys, namesKey(), ik, docKey(inst.UUID))
		for _, a := range inst.Addresses {
			keys = append(keys, addrKey(a))
		}
		for _, a := range old {
			if !slices.Contains(inst.Addresses, a) {
				keys = append(keys, addrKey(a))
			}
		}
		res, err := putScript.Run(ctx, s.rdb, keys,
			inst.Name, inst.UUID, expectRevision, instJSON, docJSON, addrsField, before, len(inst.Addresses)).Slice()
		if err != nil {
			return inst, doc, fmt.Errorf("run put script: %w", err)
		}
		status, _ := res[0].(string)
		switch status {
		case "ok":
			inst.Revision, _ = res[1].(int64)
			doc.Version, _ = res[2].(int64)
			return inst, doc, nil
		case "stale":
			continue
		case "name":
			return inst, doc, check.NameHeld(inst.Name, str(res, 1))
		case "uuid":
			return inst, doc, check.UUIDHeld(inst.UUID, str(res, 1))
		case "revision":
			stored, _ := res[1].(int64)
			return inst, doc, check.Revision(expectRevision, stored)
		case "address":
			i, _ := res[1].(int64)
			if i < 1 || int(i) > len(inst.Addresses) {
				return inst, doc, fmt.Errorf("put script: address index %d out of range", i)
			}
			return inst, doc, check.AddrHeld(inst.Addresses[i-1], s.holderName(ctx, str(res, 2)))
		default:
			return inst, doc, fmt.Errorf("put script: unexpected reply %v", res)
		}
	}
	return inst, doc, fmt.Errorf("addresses kept changing concurrently (%d attempts)", maxAttempts)
}

// backoff waits before retry number attempt (none before the first): a
// random time up to attempt milliseconds, at most 20 ms, so that writers
// racing on one instance's addresses spread out.
func backoff(ctx context.Context, attempt int) error {
	if attempt == 0 {
		return nil
	}
	d := time.Duration(rand.Int64N(int64(min(attempt, 20)) * int64(time.Millisecond)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
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

func str(res []any, i int) string {
	if i < len(res) {
		if s, ok := res[i].(string); ok {
			return s
		}
	}
	return ""
}

// encodeAddrs is the addrs field of an instance hash: a JSON list, "[]" when
// empty, compared byte for byte by the scripts.
func encodeAddrs(addrs []string) string {
	if len(addrs) == 0 {
		return "[]"
	}
	data, _ := json.Marshal(addrs) // []string always encodes
	return string(data)
}

func decodeAddrs(field string) ([]string, error) {
	if field == "" {
		return nil, nil
	}
	var addrs []string
	err := json.Unmarshal([]byte(field), &addrs)
	return addrs, err
}

// Instance implements store.Store.
func (s *Store) Instance(ctx context.Context, name string) (store.Instance, error) {
	inst, err := s.instance(ctx, name)
	if err != nil {
		return store.Instance{}, fmt.Errorf("instance %s: %w", name, err)
	}
	return inst, nil
}

func (s *Store) instance(ctx context.Context, name string) (store.Instance, error) {
	if err := ctx.Err(); err != nil {
		return store.Instance{}, err
	}
	uuid, err := s.rdb.HGet(ctx, namesKey(), name).Result()
	if errors.Is(err, goredis.Nil) {
		return store.Instance{}, store.ErrNotFound
	}
	if err != nil {
		return store.Instance{}, err
	}
	vals, err := s.rdb.HMGet(ctx, instKey(uuid), "name", "rev", "json").Result()
	if err != nil {
		return store.Instance{}, err
	}
	// A record that is gone, or now has another name, was deleted between
	// the two reads: at that moment the name did not exist.
	return decodeInstance(name, vals)
}

// decodeInstance builds a record from HMGET name rev json, or returns
// store.ErrNotFound when the hash is missing or belongs to another name.
func decodeInstance(name string, vals []any) (store.Instance, error) {
	var inst store.Instance
	if got, _ := vals[0].(string); got != name {
		return inst, store.ErrNotFound
	}
	rev, _ := vals[1].(string)
	data, _ := vals[2].(string)
	if err := json.Unmarshal([]byte(data), &inst); err != nil {
		return inst, fmt.Errorf("decode record: %w", err)
	}
	var err error
	if inst.Revision, err = strconv.ParseInt(rev, 10, 64); err != nil {
		return inst, fmt.Errorf("decode revision: %w", err)
	}
	return inst, nil
}

// Instances implements store.Store. It is not a snapshot: an instance
// deleted while the list is read is left out.
func (s *Store) Instances(ctx context.Context) ([]store.Instance, error) {
	list, err := s.instances(ctx)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	return list, nil
}

func (s *Store) instances(ctx context.Context) ([]store.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	byName, err := s.rdb.HGetAll(ctx, namesKey()).Result()
	if err != nil {
		return nil, err
	}
	if len(byName) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	cmds := make([]*goredis.SliceCmd, len(names))
	_, err = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.HMGet(ctx, instKey(byName[name]), "name", "rev", "json")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	list := make([]store.Instance, 0, len(names))
	for i, name := range names {
		inst, err := decodeInstance(name, cmds[i].Val())
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("instance %s: %w", name, err)
		}
		list = append(list, inst)
	}
	return list, nil
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
	for attempt := range maxAttempts {
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
		uuid, err := s.rdb.HGet(ctx, namesKey(), name).Result()
		if errors.Is(err, goredis.Nil) {
			return store.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read name index: %w", err)
		}
		before, err := s.rdb.HGet(ctx, instKey(uuid), "addrs").Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return fmt.Errorf("read record: %w", err)
		}
		addrs, err := decodeAddrs(before)
		if err != nil {
			return fmt.Errorf("decode stored addresses: %w", err)
		}
		keys := []string{namesKey(), instKey(uuid), docKey(uuid), secretKey(uuid)}
		for _, a := range addrs {
			keys = append(keys, addrKey(a))
		}
		res, err := deleteScript.Run(ctx, s.rdb, keys, name, uuid, before).Text()
		if err != nil {
			return fmt.Errorf("run delete script: %w", err)
		}
		switch res {
		case "ok":
			return nil
		case "notfound":
			return store.ErrNotFound
		case "stale":
			continue
		default:
			return fmt.Errorf("delete script: unexpected reply %q", res)
		}
	}
	return fmt.Errorf("instance kept changing concurrently (%d attempts)", maxAttempts)
}

// Document implements store.Store.
func (s *Store) Document(ctx context.Context, uuid string) (store.Document, error) {
	doc, err := s.document(ctx, uuid)
	if err != nil {
		return store.Document{}, fmt.Errorf("document %s: %w", uuid, err)
	}
	return doc, nil
}

func (s *Store) document(ctx context.Context, uuid string) (store.Document, error) {
	var doc store.Document
	if err := ctx.Err(); err != nil {
		return doc, err
	}
	// One HMGET, so the JSON and the version are of the same Put.
	vals, err := s.rdb.HMGet(ctx, docKey(uuid), "json", "version").Result()
	if err != nil {
		return doc, err
	}
	data, ok := vals[0].(string)
	if !ok {
		return doc, store.ErrNotFound
	}
	if err := json.Unmarshal([]byte(data), &doc); err != nil {
		return doc, fmt.Errorf("decode: %w", err)
	}
	version, _ := vals[1].(string)
	if doc.Version, err = strconv.ParseInt(version, 10, 64); err != nil {
		return doc, fmt.Errorf("decode version: %w", err)
	}
	return doc, nil
}

// DocumentVersion implements store.Store; it reads one small hash field.
func (s *Store) DocumentVersion(ctx context.Context, uuid string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("document %s: %w", uuid, err)
	}
	v, err := s.rdb.HGet(ctx, docKey(uuid), "version").Int64()
	if errors.Is(err, goredis.Nil) {
		err = store.ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("document %s: %w", uuid, err)
	}
	return v, nil
}

// LookupAddress implements store.Store. Any spelling netip accepts finds the
// address (an IPv4-mapped IPv6 address finds its IPv4 form); a string that
// is not an address is not found.
func (s *Store) LookupAddress(ctx context.Context, addr string) (string, error) {
	a, err := check.Addr(addr)
	if err != nil {
		return "", fmt.Errorf("lookup address: %w: %w", store.ErrNotFound, err)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("lookup address %s: %w", a, err)
	}
	uuid, err := s.rdb.Get(ctx, addrKey(a)).Result()
	if errors.Is(err, goredis.Nil) {
		err = store.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("lookup address %s: %w", a, err)
	}
	return uuid, nil
}

// PutSecret implements store.Store. The instance need not exist yet (a
// secret may be made before the first Put); Delete of the instance removes
// it.
func (s *Store) PutSecret(ctx context.Context, instanceUUID, id string, sec store.WrappedSecret) error {
	if err := check.Secret(instanceUUID, id); err != nil {
		return fmt.Errorf("put secret: %w", err)
	}
	err := ctx.Err()
	if err == nil {
		var data []byte
		if data, err = json.Marshal(sec); err == nil {
			err = s.rdb.HSet(ctx, secretKey(instanceUUID), id, data).Err()
		}
	}
	if err != nil {
		return fmt.Errorf("put secret %s of instance %s: %w", id, instanceUUID, err)
	}
	return nil
}

// GetSecret implements store.Store.
func (s *Store) GetSecret(ctx context.Context, instanceUUID, id string) (store.WrappedSecret, error) {
	var sec store.WrappedSecret
	err := ctx.Err()
	if err == nil {
		var data []byte
		data, err = s.rdb.HGet(ctx, secretKey(instanceUUID), id).Bytes()
		switch {
		case errors.Is(err, goredis.Nil):
			err = store.ErrNotFound
		case err == nil:
			err = json.Unmarshal(data, &sec)
		}
	}
	if err != nil {
		return store.WrappedSecret{}, fmt.Errorf("secret %s of instance %s: %w", id, instanceUUID, err)
	}
	return sec, nil
}

// DeleteSecret implements store.Store; an unknown secret is ErrNotFound.
func (s *Store) DeleteSecret(ctx context.Context, instanceUUID, id string) error {
	err := ctx.Err()
	if err == nil {
		var n int64
		n, err = s.rdb.HDel(ctx, secretKey(instanceUUID), id).Result()
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("delete secret %s of instance %s: %w", id, instanceUUID, err)
	}
	return nil
}
