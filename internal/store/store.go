// Package store keeps vmeta's state: instance records, the published
// metadata document of each instance (versioned, with the source-address
// index the metadata service uses to identify callers), wrapped secrets,
// guest passwords, and versioned records for the host's registries
// (Records).
//
// Two backends satisfy Store: bolt (embedded, one file in the data
// directory, the default) and redis (many hosts and metadata replicas).
// Both pass the same conformance suite (storetest).
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/internal/errkind"
)

// Sentinel errors; backends wrap them with context.
var (
	// ErrNotFound: no such instance, document, address or secret.
	ErrNotFound = errkind.New(errkind.NotFound, "not found")
	// ErrConflict: a name, UUID or address belongs to another instance, or
	// a compare-and-swap revision did not match.
	ErrConflict = errkind.New(errkind.Conflict, "conflict")
)

// Instance is the stored record of one instance.
type Instance struct {
	Name      string `json:"name"`
	UUID      string `json:"uuid"`
	ProjectID string `json:"project_id,omitempty"`
	// Host names the host controller that owns the instance (its domain,
	// disks and files); empty in records written before hosts were
	// tracked.
	Host      string   `json:"host,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	// Spec is the instance spec as canonical JSON (model.Instance).
	Spec []byte `json:"spec"`
	// Revision is assigned by the store: 1 on create, +1 on every put.
	Revision int64 `json:"revision"`
}

// Document is the published, guest-visible metadata of one instance.
type Document struct {
	InstanceUUID string   `json:"instance_uuid"`
	ProjectID    string   `json:"project_id,omitempty"`
	Addresses    []string `json:"addresses,omitempty"`
	// Version is assigned by the store and increases by one on every
	// publish of the instance, so a reader can tell a stale copy.
	Version int64 `json:"version"`
	// Tree is the encoded metadata tree (opaque to the store).
	Tree []byte `json:"tree"`
}

// WrappedSecret is a secret encrypted under a key-encryption key. The store
// accepts secrets only in this form: there is no method that takes
// plaintext. (internal/keys, a later part, produces these.)
type WrappedSecret struct {
	// KeyID names the key-encryption key; Generation its generation.
	KeyID      string `json:"key_id"`
	Generation int64  `json:"generation"`
	Nonce      []byte `json:"nonce"`
	Ciphertext []byte `json:"ciphertext"`
}

// Store is what hostctl and the metadata service need from a backend: the
// composition of the role interfaces below. A user of the store should
// take the narrowest of them that covers what it calls (the metadata
// service reads Documents and Passwords and follows a Watcher; the
// controller writes Instances and reads Documents; the registries of
// flavors, images, shares and devices keep Records).
// All methods are safe for concurrent use.
type Store interface {
	Instances
	Documents
	Secrets
	Passwords
	Watcher
	KeyNotifier
	Records
	RecordBatches

	// Ping reports whether the backend is reachable.
	Ping(ctx context.Context) error

	Close() error
}

// Instances is the instance records with their published documents: what
// the controller writes.
type Instances interface {
	// Put creates or replaces an instance record and its published document
	// in one atomic step, and points each of the instance's addresses at it
	// (addresses it no longer has are released). It refuses with
	// ErrConflict, changing nothing, when the name is held by a different
	// UUID, the UUID by a different name, or an address by another
	// instance; and when expectRevision >= 0 and differs from the stored
	// revision (0 = must not exist yet). expectRevision < 0 skips that check.
	// It returns the stored record and document with the revision and
	// version the store assigned.
	Put(ctx context.Context, inst Instance, doc Document, expectRevision int64) (Instance, Document, error)
	// Instance returns the record named name.
	Instance(ctx context.Context, name string) (Instance, error)
	// Instances returns every record, sorted by name.
	Instances(ctx context.Context) ([]Instance, error)
	// Delete removes an instance's record, document, address index entries
	// and secrets.
	Delete(ctx context.Context, name string) error
}

// Documents is the read side of the published documents: what the
// metadata service serves.
type Documents interface {
	// Document returns the published document of an instance by UUID.
	Document(ctx context.Context, uuid string) (Document, error)
	// DocumentVersion returns only the version of a published document.
	DocumentVersion(ctx context.Context, uuid string) (int64, error)
	// LookupAddress returns the UUID of the instance owning a source
	// address (canonical textual form, as net/netip prints it).
	LookupAddress(ctx context.Context, addr string) (string, error)
}

// Secrets is the wrapped secrets of instances.
type Secrets interface {
	// PutSecret stores a wrapped secret under an id, scoped to an instance
	// UUID (deleted with it); GetSecret returns it; DeleteSecret removes it.
	PutSecret(ctx context.Context, instanceUUID, id string, s WrappedSecret) error
	GetSecret(ctx context.Context, instanceUUID, id string) (WrappedSecret, error)
	DeleteSecret(ctx context.Context, instanceUUID, id string) error
}

// Passwords is the passwords guests post to the metadata service.
type Passwords interface {
	// SetPassword stores the password a guest posts to the metadata
	// service (Nova's password endpoint: the guest encrypts it with the
	// user's public key). It can be set once; a second call returns
	// ErrConflict and changes nothing. It is deleted with the instance;
	// for an instance that does not exist it returns ErrNotFound. Any
	// bytes are kept as given (size limits are the caller's).
	SetPassword(ctx context.Context, instanceUUID string, password []byte) error
	// Password returns the stored password, or ErrNotFound when none was
	// posted (or the instance does not exist).
	Password(ctx context.Context, instanceUUID string) ([]byte, error)
}

// Watcher is the change feed of published documents.
type Watcher interface {
	// Watch returns a feed of changes to published documents made through
	// any client of the same store (other processes and hosts included),
	// until ctx is done; then the channel is closed. Delivery is
	// at-most-once (Redis pub/sub): a reader must still converge on its
	// own (compare DocumentVersion) after a gap, which the feed signals by
	// sending a Change with Resync set. Every change committed after Watch
	// returns is delivered (or covered by a later Resync); one committed
	// just before may be delivered too. Changes of one instance arrive in
	// order. A reader should start watching before it loads what it
	// caches. Record writes are not in this feed.
	Watch(ctx context.Context) (<-chan Change, error)
}

// Change says that an instance's published document changed.
type Change struct {
	// UUID of the instance; empty when Resync is set.
	UUID string `json:"uuid,omitempty"`
	// Version is the new document version; 0 means the instance was
	// deleted.
	Version int64 `json:"version"`
	// Addresses are the instance's addresses before and after the change
	// (a reader's address cache must drop both).
	Addresses []string `json:"addresses,omitempty"`
	// Resync means changes may have been missed (the feed reconnected):
	// the reader must re-check everything it caches.
	Resync bool `json:"resync,omitempty"`
	// Key, when set, says that a key class rotated (KeyNotifier): readers
	// re-read their key files. UUID is empty then.
	Key *KeyVersion `json:"key,omitempty"`
}

// KeyVersion names a generation of a class of keys (the metadata
// service's token signing key, its proxy secret): what a key rotation
// announces on the change feed.
type KeyVersion struct {
	// Class is the key class ("token-signing-key", "proxy-secret").
	Class string `json:"class"`
	// Generation is the newest generation of the class's keys.
	Generation int64 `json:"generation"`
}

// KeyNotifier announces key rotations on the change feed (both backends
// have it): every Watch of the store, in any process, receives a Change
// with Key set. Delivery is as for document changes (at most once,
// covered by a later Resync), so a reader also re-checks its key files
// on Resync and on a timer of its own.
type KeyNotifier interface {
	NotifyKey(ctx context.Context, k KeyVersion) error
}

// Streams is an append-only log of events that other tools follow (the
// audit events of share attachments and burned devices). The Redis
// backend has it (a Redis stream per name, so every host's events are in
// one place); without it, hostctl keeps a JSON-lines file per host
// (hostctl/events).
type Streams interface {
	// Append adds payload to the stream named stream and returns its ID.
	Append(ctx context.Context, stream string, payload []byte) (id string, err error)
	// ReadStream returns up to limit entries after the entry with ID after
	// ("" or "0": from the start), oldest first. When there are none it
	// waits for one until ctx is done or wait has passed (0: it does not
	// wait) and then returns what there is (possibly nothing).
	ReadStream(ctx context.Context, stream, after string, limit int, wait time.Duration) ([]StreamEntry, error)
}

// StreamEntry is one entry of a stream.
type StreamEntry struct {
	ID      string
	Payload []byte
}

// CheckStream reports whether name can name a stream: 1 to 64 of a-z,
// 0-9, "-" and "_", starting with a letter or digit (a file name and a
// Redis key part alike).
func CheckStream(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("stream name %q: must be 1 to 64 characters", name)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && (r == '-' || r == '_')
		if !ok {
			return fmt.Errorf("stream name %q: only a-z, 0-9, \"-\" and \"_\", starting with a letter or digit", name)
		}
	}
	return nil
}
