// Package redis is the shared store backend: state in Redis, so that many
// hosts and any number of metadata-service replicas see the same instances
// and documents. It needs Redis 7.0 or newer (the write scripts carry a
// "#!lua" shebang so Redis refuses them up front when out of memory instead
// of failing half-way). The same code runs against one Redis server, a
// primary watched by Sentinel, and a Redis Cluster.
//
// # URLs
//
//	redis://[user:password@]host:port[/db][?options]        one server (rediss:// for TLS, unix:///path.sock?db=N)
//	redis+cluster://[user:password@]host:port[,host:port…][?options]
//	                                                        Redis Cluster; the hosts are seeds (database 0 only)
//	redis+sentinel://[user:password@]master@host:port[,host:port…][/db][?options]
//	                                                        the primary named master, found through the listed sentinels
//
// rediss+cluster:// and rediss+sentinel:// use TLS. A host without a port
// gets 6379 (26379 for a sentinel). user and password are those of the
// Redis servers that hold the data; sentinels that require their own go in
// the sentinel_username and sentinel_password options. min_replicas and
// replica_timeout set the durability of writes (see below). The other
// options are go-redis's (dial_timeout, read_timeout, pool_size, …).
// Errors and Addr never contain a password.
//
// # Keys
//
// Every key starts with "vmeta:". The keys of one instance carry its UUID as
// a {hash tag}, so they share one Redis Cluster hash slot and one script
// can change them together:
//
//	vmeta:inst:{<uuid>}    hash    name, rev, addrs (JSON list), json (store.Instance), password
//	vmeta:doc:{<uuid>}     hash    version, json (store.Document)
//	vmeta:secret:{<uuid>}  hash    <secret id> -> JSON store.WrappedSecret
//	vmeta:lock:{<uuid>}    string  <token>, with a TTL: a Put or Delete of the instance is under way
//
// The two global indexes are claims, one key per name and per address,
// each in a slot of its own:
//
//	vmeta:name:<name>      string  "<uuid> <token>"   (token: of the write that claimed it)
//	vmeta:addr:<addr>      string  "<uuid> <token>"   (canonical address, see Store.LookupAddress)
//
// Records (store.Records) are one hash each, in a slot of their own,
// changed by one script per call (see Store.Records for how they are
// listed):
//
//	vmeta:rec:<key>        hash    version, value
//
// and changes are published on the pub/sub channel vmeta:changes.
// Revision and version live in their own hash fields (not in the JSON, where
// they are stored as 0) so that the scripts bump them without decoding
// JSON, and DocumentVersion reads one small field.
//
// # Writes
//
// A claim names the instance that owns a name or an address. The instance
// record is the truth; a claim only reserves. Every read through an index
// verifies it against the record: LookupAddress returns a UUID only if that
// instance's record lists the address, Instance(name) only if the record
// has that name. So a claim without a record (a Put that stopped half-way)
// or a record without its claims (never made: see below) can make a lookup
// miss, never return the wrong instance.
//
// Put and Delete run in steps, each one Lua script on one slot (Redis runs
// a script in isolation), in this order:
//
//  1. lock the instance: SET vmeta:lock:{uuid} NX with a TTL (the lock
//     lease, see WithLockLease) and read its record, waiting while another
//     writer holds the lock. One writer per instance at a time; a crashed
//     writer's lock expires.
//  2. claim the name, then the addresses in sorted order: a free key, or
//     one the instance owns, is set to "<uuid> <token>" (a fresh token per
//     Put). A key owned by another instance is a conflict, unless that
//     instance is not being written (no lock) and its record does not list
//     the name or address: such a claim is left over by a crash and is
//     taken over with a compare-and-set on the exact value read (the token
//     makes that safe against the owner re-claiming it in between). Keys
//     that the record already lists and the instance still owns are left
//     as they are (one pipelined read checks them): nobody can take them
//     over while the record lists them.
//  3. write the record and the document in one script that first checks
//     that the lock is still this writer's (a writer that stalled past its
//     lease changes nothing), re-checks the revision and publishes the
//     change in the same script: a change is never published without being
//     stored, nor stored without being published.
//  4. release the addresses the instance no longer has (only keys it owns),
//     then the lock; when there are none, the script of step 3 unlocks.
//
// An update that keeps the name and addresses thus costs three round
// trips: lock, read the claims, write.
//
// A refused Put (a conflict in step 2 or 3) gives back what it claimed
// (the new claims are deleted, re-claimed ones get their old value back)
// before it unlocks, so it changes nothing anyone can see. A Put that dies
// between steps leaves claims its record does not list; lookups ignore
// them, the lock expires after the lease, and then a retry of the Put
// completes and other instances can take the names and addresses over.
// Delete locks, deletes the record, document and secrets in one script
// (publishing the deletion), then releases the instance's claims.
//
// On a single server this costs a round trip or two more than one big
// script would, and buys one code path for every deployment: the
// conformance suite runs on a single server, Sentinel, and a three-node
// cluster.
//
// Everything above assumes that a writer does not stall for longer than
// the lock lease while it holds the lock. If it does, its record write is
// refused (the script checks the lock), and it skips releasing addresses
// once half the lease has passed, so a stall can leave claims behind but
// not take away another writer's. A Redis failover that loses the last
// writes (replication is asynchronous; see Durability for what the store
// waits for) can leave a record without a claim or a claim without a
// record; reads stay correct (they verify), and the next Put of the
// instance claims again.
//
// # Durability
//
// Redis replicates asynchronously: a write the primary has applied can be
// lost when a replica that has not received it yet is promoted (Sentinel
// failover, or a cluster shard's failover). So every write that the store
// reports as done — Put, Delete, PutRecord, DeleteRecord, PutSecret,
// DeleteSecret and SetPassword — can first wait until min_replicas
// replicas have acknowledged it: the store sends WAIT min_replicas
// replica_timeout on the connection that wrote, right after the script or
// command that changed something (WAIT cannot run inside a script, and it
// counts the replicas that have every write of its own connection, so it
// must be that connection). A write not acknowledged in time fails with an
// error wrapping ErrNotDurable, such as "not durable: written on the
// primary but acknowledged by 0 of 1 replicas within 2s; it may be lost
// on failover": it was applied and is visible, and is lost only if the
// primary fails before a replica catches up. Its caller should treat it as
// not done (and may read back or write again). A write refused for a
// conflict changed nothing and does not wait.
//
//	min_replicas=N       replicas that must acknowledge each write; 0: do not wait.
//	                     Default 1 for redis+sentinel:// (DefaultSentinelReplicas),
//	                     0 for one server and for a cluster.
//	replica_timeout=D    how long a write waits, a Go duration (500ms, 2s); default 2s
//	                     (DefaultReplicaTimeout).
//
// The URL's options override WithReplicas, which overrides the scheme's
// default. With Sentinel and min_replicas=1, a write the store reported as
// done is on the primary and on at least one replica; with one replica
// (which Sentinel then promotes) it survives the primary's failover; with
// more, Sentinel prefers the replica with the most data but a promoted
// replica could still lack it (Redis does not promise more). While fewer
// than min_replicas replicas are connected (after a failover, until the old
// primary comes back as a replica), every write waits replica_timeout and
// fails: run a primary and two replicas, or set min_replicas=0 to trade
// durability for availability. Without waiting, a failover loses the
// writes of roughly the last replication round trip (milliseconds on a
// LAN; more under load) that the store had reported as done.
//
// One write of the store is several steps (see Writes). With one primary,
// WAIT after the step that commits (the write script) also covers the
// earlier steps (claims), since a primary replicates its writes in order;
// the later steps (releasing old addresses, the lock) are not waited for:
// losing them leaves a claim that reads ignore, or a lock that expires. On
// a cluster each shard replicates on its own, so each claim also waits on
// its own shard (the connection goes to the key's primary); a claim not
// acknowledged in time aborts the Put, which gives back its claims.
//
// # Change feed
//
// The write scripts PUBLISH a JSON change on vmeta:changes; Watch
// SUBSCRIBEs. Pub/sub is at most once: see Store.Watch for how a gap
// becomes a Resync.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/internal/check"
)

const prefix = "vmeta:"

func instKey(uuid string) string   { return prefix + "inst:{" + uuid + "}" }
func docKey(uuid string) string    { return prefix + "doc:{" + uuid + "}" }
func secretKey(uuid string) string { return prefix + "secret:{" + uuid + "}" }
func lockKey(uuid string) string   { return prefix + "lock:{" + uuid + "}" }
func nameKey(name string) string   { return prefix + "name:" + name }
func addrKey(addr string) string   { return prefix + "addr:" + addr }

const namePrefix = prefix + "name:"

// claimValue is the value of a claim key.
func claimValue(uuid, token string) string { return uuid + " " + token }

// claimOwner returns the UUID part of a claim's value (UUIDs have no
// spaces: see check.UUID).
func claimOwner(v string) string {
	owner, _, _ := strings.Cut(v, " ")
	return owner
}

// newToken returns a random token naming one write.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Store is a store.Store kept in Redis.
type Store struct {
	rdb     goredis.UniversalClient
	addr    string
	opts    options
	cluster bool // rdb is a *goredis.ClusterClient

	// minReplicas and replicaTimeout: see WithReplicas.
	minReplicas    int
	replicaTimeout time.Duration

	closing   context.Context // done when Close is called; ends every Watch
	close     context.CancelFunc
	closeOnce sync.Once
}

var _ store.Store = (*Store)(nil)

// Open connects to the Redis deployment named by rawURL (see the package
// comment) and checks that it answers.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	t, err := parseTarget(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open redis store: %w", err)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	d := durability{minReplicas: t.defaultReplicas, timeout: DefaultReplicaTimeout}.over(o.replicas).over(t.replicas)
	if o.password != "" {
		t.setPassword(o.password)
		t.secrets = append(t.secrets, o.password)
	}
	rdb := t.newClient()
	_, cluster := rdb.(*goredis.ClusterClient)
	closing, cancel := context.WithCancel(context.Background())
	s := &Store{rdb: rdb, addr: t.desc, opts: o, cluster: cluster,
		minReplicas: d.minReplicas, replicaTimeout: d.timeout,
		closing: closing, close: cancel}
	if err := s.ping(ctx); err != nil {
		s.Close()
		for _, secret := range t.secrets {
			err = scrub(err, secret)
		}
		return nil, fmt.Errorf("open redis store at %s: %w", t.desc, err)
	}
	return s, nil
}

// Addr describes the Redis deployment: host:port and database of one
// server, "cluster h1:p1,h2:p2,…" or "sentinel master@h1:p1,… (db N)".
func (s *Store) Addr() string { return s.addr }

// Close ends every Watch and closes the connections to Redis.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.close()
		err = s.rdb.Close()
	})
	if err != nil {
		return fmt.Errorf("close redis store %s: %w", s.addr, err)
	}
	return nil
}

// encodeAddrs is the addrs field of an instance hash: a JSON list, "[]"
// when empty.
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
	claim, err := s.rdb.Get(ctx, nameKey(name)).Result()
	if errors.Is(err, goredis.Nil) {
		return store.Instance{}, store.ErrNotFound
	}
	if err != nil {
		return store.Instance{}, err
	}
	vals, err := s.rdb.HMGet(ctx, instKey(claimOwner(claim)), "name", "rev", "json").Result()
	if err != nil {
		return store.Instance{}, err
	}
	// A claim whose record is missing or has another name is not (yet, or
	// any more) the instance's: the name does not exist.
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

// Instances implements store.Store: it scans the name claims (on every
// primary of a cluster) and reads the records they point at. It is not a
// snapshot: an instance created or deleted while the list is read may be
// in it or not.
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
	keys, err := s.scan(ctx, namePrefix+"*")
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	slices.Sort(keys) // by name: the prefix is common
	claims := make([]*goredis.StringCmd, len(keys))
	if _, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range keys {
			claims[i] = p.Get(ctx, k)
		}
		return nil
	}); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	records := make([]*goredis.SliceCmd, len(keys))
	if _, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := range keys {
			if claim, err := claims[i].Result(); err == nil {
				records[i] = p.HMGet(ctx, instKey(claimOwner(claim)), "name", "rev", "json")
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	list := make([]store.Instance, 0, len(keys))
	for i, k := range keys {
		if records[i] == nil {
			continue // released since the scan
		}
		name := strings.TrimPrefix(k, namePrefix)
		inst, err := decodeInstance(name, records[i].Val())
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

// scan returns the keys matching pattern, from every primary of a cluster.
func (s *Store) scan(ctx context.Context, pattern string) ([]string, error) {
	var (
		mu   sync.Mutex
		keys []string
	)
	scanOne := func(ctx context.Context, c goredis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		var found []string
		for iter.Next(ctx) {
			found = append(found, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		mu.Lock()
		keys = append(keys, found...)
		mu.Unlock()
		return nil
	}
	var err error
	if c, ok := s.rdb.(*goredis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error { return scanOne(ctx, n) })
	} else {
		err = scanOne(ctx, s.rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", pattern, err)
	}
	// SCAN may return a key more than once.
	slices.Sort(keys)
	return slices.Compact(keys), nil
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
// is not an address is not found. The claim is verified against the
// owner's record (two round trips): an address whose record does not list
// it is not found.
func (s *Store) LookupAddress(ctx context.Context, addr string) (string, error) {
	a, err := check.Addr(addr)
	if err != nil {
		return "", fmt.Errorf("lookup address: %w: %w", store.ErrNotFound, err)
	}
	uuid, err := s.lookupAddress(ctx, a)
	if err != nil {
		return "", fmt.Errorf("lookup address %s: %w", a, err)
	}
	return uuid, nil
}

func (s *Store) lookupAddress(ctx context.Context, a string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	claim, err := s.rdb.Get(ctx, addrKey(a)).Result()
	if errors.Is(err, goredis.Nil) {
		return "", store.ErrNotFound
	}
	if err != nil {
		return "", err
	}
	uuid := claimOwner(claim)
	field, err := s.rdb.HGet(ctx, instKey(uuid), "addrs").Result()
	if errors.Is(err, goredis.Nil) {
		return "", store.ErrNotFound
	}
	if err != nil {
		return "", err
	}
	addrs, err := decodeAddrs(field)
	if err != nil {
		return "", fmt.Errorf("decode addresses of instance %s: %w", uuid, err)
	}
	if !slices.Contains(addrs, a) {
		return "", store.ErrNotFound
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
			err = s.commit(ctx, secretKey(instanceUUID), func(c writeConn) (bool, error) {
				err := c.HSet(ctx, secretKey(instanceUUID), id, data).Err()
				return err == nil, err
			})
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
		err = s.commit(ctx, secretKey(instanceUUID), func(c writeConn) (bool, error) {
			var err error
			n, err = c.HDel(ctx, secretKey(instanceUUID), id).Result()
			return n > 0, err
		})
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("delete secret %s of instance %s: %w", id, instanceUUID, err)
	}
	return nil
}

// setPasswordScript: KEYS[1] instance; ARGV[1] password.
// Returns "ok", "notfound" or "conflict".
var setPasswordScript = goredis.NewScript(`#!lua
if redis.call('HEXISTS', KEYS[1], 'name') == 0 then
  return 'notfound'
end
if redis.call('HSETNX', KEYS[1], 'password', ARGV[1]) == 0 then
  return 'conflict'
end
return 'ok'
`)

// SetPassword implements store.Store; the password is a field of the
// instance's record hash, so it goes with the record. The instance must
// exist.
func (s *Store) SetPassword(ctx context.Context, instanceUUID string, password []byte) error {
	err := ctx.Err()
	if err == nil {
		err = check.UUID(instanceUUID)
	}
	if err == nil {
		var res string
		err = s.commit(ctx, instKey(instanceUUID), func(c writeConn) (bool, error) {
			var err error
			res, err = setPasswordScript.Run(ctx, c, []string{instKey(instanceUUID)}, password).Text()
			return res == "ok", err
		})
		switch {
		case err != nil:
		case res == "notfound":
			err = store.ErrNotFound
		case res == "conflict":
			err = fmt.Errorf("%w: a password is already set", store.ErrConflict)
		case res != "ok":
			err = fmt.Errorf("set password script: unexpected reply %q", res)
		}
	}
	if err != nil {
		return fmt.Errorf("set password of instance %s: %w", instanceUUID, err)
	}
	return nil
}

// Password implements store.Store.
func (s *Store) Password(ctx context.Context, instanceUUID string) ([]byte, error) {
	err := ctx.Err()
	var password []byte
	if err == nil {
		password, err = s.rdb.HGet(ctx, instKey(instanceUUID), "password").Bytes()
		if errors.Is(err, goredis.Nil) {
			err = store.ErrNotFound
		}
	}
	if err != nil {
		return nil, fmt.Errorf("password of instance %s: %w", instanceUUID, err)
	}
	if password == nil {
		password = []byte{}
	}
	return password, nil
}
