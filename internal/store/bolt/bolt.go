// Package bolt is the embedded store backend: the whole state in one bbolt
// file in the data directory, for a single host.
//
// bbolt takes an exclusive lock on the file, so exactly one process (the
// hostctl daemon) has it open; a second Open fails with ErrLocked after a
// short wait instead of hanging, and other tools go through the daemon.
//
// Layout, one top-level bucket each, every value JSON:
//
//	instances  name -> store.Instance
//	uuids      uuid -> name
//	documents  uuid -> store.Document
//	addresses  addr -> uuid          (canonical address, see Store.LookupAddress)
//	secrets    uuid -> bucket: id -> store.WrappedSecret
//	passwords  uuid -> the password the guest posted (raw bytes after a
//	                   one-byte format prefix, so an empty password is
//	                   still a value)
//	records    key -> version (8 bytes, big-endian) + value   (store.Records)
//	groups     group -> bucket: key -> version + value         (store.Groups)
//
// Every write is one bbolt read-write transaction that makes all its checks
// before it writes, so a refused Put or Delete changes nothing. Each commit
// is fsynced: Put costs about one fsync of the data directory's disk.
//
// # Watch
//
// bbolt is single-process, so the change feed is in-process: Put and
// Delete hand a store.Change to every watcher after their transaction has
// committed, in commit order (a mutex spans both). A watcher has a buffered
// channel (feed.DefaultSize changes) and the writer never waits for it:
// when the buffer is full the change is dropped and the watcher gets a
// Change{Resync: true} as soon as it has room again, after which it must
// re-check what it caches. Close ends every watcher's channel.
package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/internal/check"
	"github.com/vmeta/vmeta/internal/store/internal/feed"
)

// ErrLocked is returned by Open when another process has the file open.
var ErrLocked = errors.New("locked by another process")

// DefaultLockTimeout is how long Open waits for the file lock by default.
const DefaultLockTimeout = time.Second

var (
	bucketInstances = []byte("instances")
	bucketUUIDs     = []byte("uuids")
	bucketDocuments = []byte("documents")
	bucketAddresses = []byte("addresses")
	bucketSecrets   = []byte("secrets")
	bucketPasswords = []byte("passwords")
	bucketRecords   = []byte("records")
	bucketGroups    = []byte("groups")
)

// passwordFormat prefixes a stored password (bbolt does not tell an empty
// value from a missing one in every version; the prefix also leaves room
// for a format change).
const passwordFormat = 1

// Store is a store.Store kept in one bbolt file.
type Store struct {
	db   *bbolt.DB
	path string

	// writeMu spans a Put or Delete transaction and the notification of
	// its change, so watchers see changes in commit order.
	writeMu sync.Mutex

	watchBuffer int // of each watcher's channel

	mu       sync.Mutex // guards watchers and closed
	watchers map[*feed.Sink]struct{}
	closed   bool
}

var _ store.Store = (*Store)(nil)

// Option adjusts Open.
type Option func(*options)

type options struct {
	lockTimeout time.Duration
	watchBuffer int
}

// WithLockTimeout sets how long Open waits for another process to release
// the file before it fails with ErrLocked. Non-positive values mean
// DefaultLockTimeout: Open never waits forever.
func WithLockTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.lockTimeout = d
		}
	}
}

// withWatchBuffer sets the buffer of each watcher's channel (tests make it
// overflow quickly); the default is feed.DefaultSize.
func withWatchBuffer(n int) Option {
	return func(o *options) { o.watchBuffer = n }
}

// Open opens (creating if needed) the store file at path. A missing parent
// directory is created with mode 0700, the file with mode 0600.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{lockTimeout: DefaultLockTimeout, watchBuffer: feed.DefaultSize}
	for _, opt := range opts {
		opt(&o)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db, err := openDB(path, o.lockTimeout)
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open store %s: %w (gave up after %s): %w", path, ErrLocked, o.lockTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := checkDB(db, path); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	err = update(db, path, func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketInstances, bucketUUIDs, bucketDocuments, bucketAddresses, bucketSecrets, bucketPasswords, bucketRecords, bucketGroups} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return &Store{db: db, path: path, watchBuffer: o.watchBuffer, watchers: map[*feed.Sink]struct{}{}}, nil
}

// Path returns the file the store is kept in.
func (s *Store) Path() string { return s.path }

// Close releases the file and ends every Watch; the Store must not be used
// afterwards.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	for w := range s.watchers {
		w.Close()
	}
	s.mu.Unlock()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", s.path, err)
	}
	return nil
}

type buckets struct {
	instances, uuids, documents, addresses, secrets, passwords, records, groups *bbolt.Bucket
}

func open(tx *bbolt.Tx) buckets {
	return buckets{
		instances: tx.Bucket(bucketInstances),
		uuids:     tx.Bucket(bucketUUIDs),
		documents: tx.Bucket(bucketDocuments),
		addresses: tx.Bucket(bucketAddresses),
		secrets:   tx.Bucket(bucketSecrets),
		passwords: tx.Bucket(bucketPasswords),
		records:   tx.Bucket(bucketRecords),
		groups:    tx.Bucket(bucketGroups),
	}
}

// Put implements store.Store.
func (s *Store) Put(ctx context.Context, inst store.Instance, doc store.Document, expectRevision int64) (store.Instance, store.Document, error) {
	inst, doc, err := check.Put(inst, doc)
	if err != nil {
		return store.Instance{}, store.Document{}, err
	}
	var oldAddrs []string
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	err = s.update(ctx, func(b buckets) error {
		var old store.Instance
		if v := b.instances.Get([]byte(inst.Name)); v != nil {
			if err := json.Unmarshal(v, &old); err != nil {
				return fmt.Errorf("decode stored record: %w", err)
			}
			if old.UUID != inst.UUID {
				return check.NameHeld(inst.Name, old.UUID)
			}
		}
		if holder := b.uuids.Get([]byte(inst.UUID)); holder != nil && string(holder) != inst.Name {
			return check.UUIDHeld(inst.UUID, string(holder))
		}
		if expectRevision >= 0 && expectRevision != old.Revision {
			return check.Revision(expectRevision, old.Revision)
		}
		for _, a := range inst.Addresses {
			if owner := b.addresses.Get([]byte(a)); owner != nil && string(owner) != inst.UUID {
				holder := string(owner)
				if name := b.uuids.Get(owner); name != nil {
					holder = string(name)
				}
				return check.AddrHeld(a, holder)
			}
		}

		// Every check passed: write.
		keep := make(map[string]bool, len(inst.Addresses))
		for _, a := range inst.Addresses {
			keep[a] = true
		}
		for _, a := range old.Addresses {
			if !keep[a] && string(b.addresses.Get([]byte(a))) == inst.UUID {
				if err := b.addresses.Delete([]byte(a)); err != nil {
					return fmt.Errorf("release address %s: %w", a, err)
				}
			}
		}
		for _, a := range inst.Addresses {
			if err := b.addresses.Put([]byte(a), []byte(inst.UUID)); err != nil {
				return fmt.Errorf("claim address %s: %w", a, err)
			}
		}
		if v := b.documents.Get([]byte(inst.UUID)); v != nil {
			prev, err := documentVersion(v)
			if err != nil {
				return fmt.Errorf("decode stored document: %w", err)
			}
			doc.Version = prev
		}
		doc.Version++
		inst.Revision = old.Revision + 1
		oldAddrs = old.Addresses
		if err := putJSON(b.instances, inst.Name, inst); err != nil {
			return err
		}
		if err := putJSON(b.documents, inst.UUID, doc); err != nil {
			return err
		}
		return b.uuids.Put([]byte(inst.UUID), []byte(inst.Name))
	})
	if err != nil {
		return store.Instance{}, store.Document{}, fmt.Errorf("put instance %s: %w", inst.Name, err)
	}
	s.notify(store.Change{UUID: inst.UUID, Version: doc.Version, Addresses: union(oldAddrs, inst.Addresses)})
	return inst, doc, nil
}

// union returns the addresses in a or b, each once, a's first.
func union(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	seen := make(map[string]bool, len(a)+len(b))
	for _, list := range [][]string{a, b} {
		for _, x := range list {
			if !seen[x] {
				seen[x] = true
				out = append(out, x)
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Instance implements store.Store.
func (s *Store) Instance(ctx context.Context, name string) (store.Instance, error) {
	var inst store.Instance
	err := s.view(ctx, func(b buckets) error {
		return getJSON(b.instances, name, &inst)
	})
	if err != nil {
		return store.Instance{}, fmt.Errorf("instance %s: %w", name, err)
	}
	return inst, nil
}

// Instances implements store.Store. bbolt keeps keys in byte order, which
// is the order of Go strings, so the records come out sorted by name.
func (s *Store) Instances(ctx context.Context) ([]store.Instance, error) {
	var list []store.Instance
	err := s.view(ctx, func(b buckets) error {
		return b.instances.ForEach(func(k, v []byte) error {
			var inst store.Instance
			if err := json.Unmarshal(v, &inst); err != nil {
				return fmt.Errorf("decode instance %s: %w", k, err)
			}
			list = append(list, inst)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	return list, nil
}

// InstanceHosts returns how many instance records name each host (""
// for records written before hosts were tracked), reading each record
// only up to its host: a host's heartbeat counts its instances every few
// seconds, and decoding every record (its spec too) cost ~30 µs each.
func (s *Store) InstanceHosts(ctx context.Context) (map[string]int, error) {
	counts := map[string]int{}
	err := s.view(ctx, func(b buckets) error {
		return b.instances.ForEach(func(k, v []byte) error {
			if h, ok := hostFast(v); ok {
				counts[string(h)]++
				return nil
			}
			var rec struct {
				Host string `json:"host"`
			}
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode instance %s: %w", k, err)
			}
			counts[rec.Host]++
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("count instances by host: %w", err)
	}
	return counts, nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, name string) error {
	var inst store.Instance
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	err := s.update(ctx, func(b buckets) error {
		if err := getJSON(b.instances, name, &inst); err != nil {
			return err
		}
		uuid := []byte(inst.UUID)
		for _, a := range inst.Addresses {
			if bytes.Equal(b.addresses.Get([]byte(a)), uuid) {
				if err := b.addresses.Delete([]byte(a)); err != nil {
					return fmt.Errorf("release address %s: %w", a, err)
				}
			}
		}
		if b.secrets.Bucket(uuid) != nil {
			if err := b.secrets.DeleteBucket(uuid); err != nil {
				return fmt.Errorf("delete secrets: %w", err)
			}
		}
		if err := b.passwords.Delete(uuid); err != nil {
			return fmt.Errorf("delete password: %w", err)
		}
		if err := b.documents.Delete(uuid); err != nil {
			return fmt.Errorf("delete document: %w", err)
		}
		if err := b.uuids.Delete(uuid); err != nil {
			return fmt.Errorf("delete uuid: %w", err)
		}
		return b.instances.Delete([]byte(name))
	})
	if err != nil {
		return fmt.Errorf("delete instance %s: %w", name, err)
	}
	s.notify(store.Change{UUID: inst.UUID, Version: 0, Addresses: union(inst.Addresses, nil)})
	return nil
}

// Document implements store.Store.
func (s *Store) Document(ctx context.Context, uuid string) (store.Document, error) {
	var doc store.Document
	err := s.view(ctx, func(b buckets) error {
		return getJSON(b.documents, uuid, &doc)
	})
	if err != nil {
		return store.Document{}, fmt.Errorf("document %s: %w", uuid, err)
	}
	return doc, nil
}

// DocumentVersion implements store.Store. It reads the stored JSON only up
// to the version field, which is written before the (large) tree.
func (s *Store) DocumentVersion(ctx context.Context, uuid string) (int64, error) {
	var version int64
	err := s.view(ctx, func(b buckets) error {
		v := b.documents.Get([]byte(uuid))
		if v == nil {
			return store.ErrNotFound
		}
		var err error
		version, err = documentVersion(v)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("document %s: %w", uuid, err)
	}
	return version, nil
}

// LookupAddress implements store.Store. Any spelling netip accepts finds the
// address (an IPv4-mapped IPv6 address finds its IPv4 form); a string that
// is not an address is not found.
func (s *Store) LookupAddress(ctx context.Context, addr string) (string, error) {
	a, err := check.Addr(addr)
	if err != nil {
		return "", fmt.Errorf("lookup address: %w: %w", store.ErrNotFound, err)
	}
	var uuid string
	err = s.view(ctx, func(b buckets) error {
		v := b.addresses.Get([]byte(a))
		if v == nil {
			return store.ErrNotFound
		}
		uuid = string(v)
		return nil
	})
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
	err := s.update(ctx, func(b buckets) error {
		sb, err := b.secrets.CreateBucketIfNotExists([]byte(instanceUUID))
		if err != nil {
			return err
		}
		return putJSON(sb, id, sec)
	})
	if err != nil {
		return fmt.Errorf("put secret %s of instance %s: %w", id, instanceUUID, err)
	}
	return nil
}

// GetSecret implements store.Store.
func (s *Store) GetSecret(ctx context.Context, instanceUUID, id string) (store.WrappedSecret, error) {
	var sec store.WrappedSecret
	err := s.view(ctx, func(b buckets) error {
		sb := b.secrets.Bucket([]byte(instanceUUID))
		if sb == nil {
			return store.ErrNotFound
		}
		return getJSON(sb, id, &sec)
	})
	if err != nil {
		return store.WrappedSecret{}, fmt.Errorf("secret %s of instance %s: %w", id, instanceUUID, err)
	}
	return sec, nil
}

// DeleteSecret implements store.Store; an unknown secret is ErrNotFound.
func (s *Store) DeleteSecret(ctx context.Context, instanceUUID, id string) error {
	err := s.update(ctx, func(b buckets) error {
		sb := b.secrets.Bucket([]byte(instanceUUID))
		if sb == nil || sb.Get([]byte(id)) == nil {
			return store.ErrNotFound
		}
		if err := sb.Delete([]byte(id)); err != nil {
			return err
		}
		if k, _ := sb.Cursor().First(); k == nil {
			return b.secrets.DeleteBucket([]byte(instanceUUID))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete secret %s of instance %s: %w", id, instanceUUID, err)
	}
	return nil
}

// SetPassword implements store.Store. The instance must exist.
func (s *Store) SetPassword(ctx context.Context, instanceUUID string, password []byte) error {
	err := s.update(ctx, func(b buckets) error {
		if b.documents.Get([]byte(instanceUUID)) == nil {
			return store.ErrNotFound
		}
		if b.passwords.Get([]byte(instanceUUID)) != nil {
			return fmt.Errorf("%w: a password is already set", store.ErrConflict)
		}
		v := make([]byte, 0, 1+len(password))
		v = append(v, passwordFormat)
		return b.passwords.Put([]byte(instanceUUID), append(v, password...))
	})
	if err != nil {
		return fmt.Errorf("set password of instance %s: %w", instanceUUID, err)
	}
	return nil
}

// Password implements store.Store.
func (s *Store) Password(ctx context.Context, instanceUUID string) ([]byte, error) {
	var password []byte
	err := s.view(ctx, func(b buckets) error {
		v := b.passwords.Get([]byte(instanceUUID))
		if v == nil {
			return store.ErrNotFound
		}
		if len(v) == 0 || v[0] != passwordFormat {
			return fmt.Errorf("stored password has an unknown format")
		}
		password = bytes.Clone(v[1:]) // v is only valid inside the transaction
		if password == nil {
			password = []byte{}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("password of instance %s: %w", instanceUUID, err)
	}
	return password, nil
}

// LosslessFeed reports that Watch's feed loses no change unsaid (see
// Watch in the package comment): readers following it need not sweep
// their caches periodically (server.LosslessWatcher).
func (s *Store) LosslessFeed() bool { return true }

// Watch implements store.Store: see the package comment. Only this Store's
// own writes are seen (bbolt allows one process).
func (s *Store) Watch(ctx context.Context) (<-chan store.Change, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("watch: store %s is closed", s.path)
	}
	var w *feed.Sink
	w = feed.New(ctx, s.watchBuffer, func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
	})
	s.watchers[w] = struct{}{}
	return w.C(), nil
}

// NotifyKey implements store.KeyNotifier: every watcher of this Store
// receives a Change with Key set (bbolt is single-process, so the feed is
// too).
func (s *Store) NotifyKey(ctx context.Context, k store.KeyVersion) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("notify key %s: %w", k.Class, err)
	}
	if k.Class == "" {
		return fmt.Errorf("notify key: class is empty")
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("notify key %s: store %s is closed", k.Class, s.path)
	}
	s.notify(store.Change{Key: &k})
	return nil
}

// notify hands c to every watcher without waiting for any.
func (s *Store) notify(c store.Change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		w.Send(c)
	}
}

// Ping implements store.Store: the file is local, so this only reports
// whether the Store is still open.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("ping: store %s is closed", s.path)
	}
	return nil
}

// update runs fn in a read-write transaction, unless ctx is done before the
// transaction starts (bbolt itself cannot be interrupted).
func (s *Store) update(ctx context.Context, fn func(buckets) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		// The writer lock may have taken a while.
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(open(tx))
	})
}

func (s *Store) view(ctx context.Context, fn func(buckets) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(func(tx *bbolt.Tx) error { return fn(open(tx)) })
}

func putJSON(b *bbolt.Bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	if err := b.Put([]byte(key), data); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}

// getJSON decodes the value of key into v, or returns store.ErrNotFound.
// json.Unmarshal copies, so v stays valid after the transaction.
func getJSON(b *bbolt.Bucket, key string, v any) error {
	data := b.Get([]byte(key))
	if data == nil {
		return store.ErrNotFound
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %s: %w", key, err)
	}
	return nil
}

// documentVersion reads the "version" member of an encoded store.Document
// without decoding (or, when it comes first, even scanning) the tree.
func documentVersion(data []byte) (int64, error) {
	if v, ok := versionFast(data); ok {
		return v, nil
	}
	return decodeVersion(data)
}

// decodeVersion is documentVersion with a JSON decoder.
func decodeVersion(data []byte) (int64, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, fmt.Errorf("document is not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return 0, err
		}
		if key, _ := tok.(string); key == "version" {
			var v int64
			if err := dec.Decode(&v); err != nil {
				return 0, fmt.Errorf("decode version: %w", err)
			}
			return v, nil
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("document has no version")
}
