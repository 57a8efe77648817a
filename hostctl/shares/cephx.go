package shares

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
)

// CephX is this host's own CephX client for CephFS shares, as the shares
// and key-rotation specifications have it:
//
//   - the client is client.vmeta-<host>.<generation> (the generation in
//     the name, as the key-rotation specification recommends, so every
//     generation can be listed and pruned in Ceph's own auth database);
//   - its capabilities are limited to the paths of the shares mapped on
//     this host: mon 'allow r', mds 'allow rw [fsname=F] path=P, …',
//     osd 'allow rw tag cephfs data=F, …' (every generation alike);
//   - a share's path is granted when it is first mapped here, and revoked
//     from every host's client only once no instance on any host holds the
//     share (the specification's rule for the access policy);
//   - it is created and changed with an admin keyring the operator gives
//     once (ConfigureAdmin); the admin key and every generation's key live
//     in the key manager, wrapped; a key reaches Ceph's tools only through
//     a 0600 file in a private directory removed right after;
//   - new mounts use the newest generation; a mount keeps the generation
//     it was made with until its instances stop; a prior generation is
//     deleted from Ceph (Prune, RotateTo) only when no mount uses it.
//
// Its state is one store record per host, cephx/<host>, and one record
// per CephFS mount on this host, cephx-mount/<host>/<share> (the
// generation it was made with), written before the mount and deleted
// after the unmount.
type CephX struct {
	host   string
	st     store.Records
	keys   CephKeys
	auth   CephAuth
	runDir string
	run    Runner
	log    *slog.Logger
	now    func() time.Time
	// users names the instances using a share's mount on this host (the
	// service's Mounts.Users).
	users func(share string) []string
	// kernel reports whether to mount with the kernel client (mount -t
	// ceph) rather than ceph-fuse: KernelCephFS by default.
	kernel func() bool

	mu sync.Mutex
}

// CephKeys is what CephX uses of the key manager (internal/keys).
type CephKeys interface {
	Create(ctx context.Context, req keys.Request) (keys.Secret, error)
	Passphrase(ctx context.Context, id string) ([]byte, error)
	List(ctx context.Context, project string) ([]keys.Secret, error)
	Delete(ctx context.Context, id string) error
}

// CephKeysProject is the key-manager project of CephX keys.
const CephKeysProject = "vmeta-cephx"

// CephAdmin is the admin identity Ceph is managed with.
type CephAdmin struct {
	// Mons is the monitors (mon_host).
	Mons string
	// Name is the admin's entity (client.admin).
	Name string
	// Key is its key (base64, as in a keyring).
	Key []byte
}

// CephCaps are a client's capabilities.
type CephCaps struct{ Mon, MDS, OSD string }

// CephAuth is Ceph's auth database and cluster facts, asked as the admin
// (the ceph CLI: CephCLI; a fake in tests).
type CephAuth interface {
	// Ensure creates client with caps, or sets caps on it when it
	// exists, and returns its key.
	Ensure(ctx context.Context, a CephAdmin, client string, caps CephCaps) ([]byte, error)
	// SetCaps sets the caps of an existing client.
	SetCaps(ctx context.Context, a CephAdmin, client string, caps CephCaps) error
	// Remove deletes a client (no error when it does not exist).
	Remove(ctx context.Context, a CephAdmin, client string) error
	// Clients lists the clients whose entity starts with prefix.
	Clients(ctx context.Context, a CephAdmin, prefix string) ([]string, error)
	// Version is the cluster's Ceph version ("16.2.15"); it also proves
	// that the admin authenticates.
	Version(ctx context.Context, a CephAdmin) (string, error)
	// FileSystems lists the file systems' names.
	FileSystems(ctx context.Context, a CephAdmin) ([]string, error)
}

// Errors of CephX.
var (
	// ErrCephXNotConfigured: no admin keyring was given on this host.
	ErrCephXNotConfigured = errkind.New(errkind.Conflict, "CephX is not configured on this host (hostctl share ceph-auth --admin-keyring FILE --mon MONS)")
	// ErrCephInvalid: a keyring or a request is malformed.
	ErrCephInvalid = errkind.New(errkind.Invalid, "invalid CephX request")
)

// CephXOptions configure a CephX.
type CephXOptions struct {
	Host string
	// Store keeps the records (shared by the hosts).
	Store store.Records
	// Keys is the key manager.
	Keys CephKeys
	// Auth is Ceph's auth database; CephCLI when nil.
	Auth CephAuth
	// RunDir is the private runtime directory keyring files go to for
	// the moment of a mount (created 0700).
	RunDir string
	// Runner runs ceph-fuse; ExecRunner when nil.
	Runner Runner
	Logger *slog.Logger
}

// NewCephX returns the host's CephX client manager.
func NewCephX(o CephXOptions) *CephX {
	c := &CephX{host: o.Host, st: o.Store, keys: o.Keys, auth: o.Auth, runDir: o.RunDir, run: o.Runner, log: o.Logger, now: time.Now}
	if c.auth == nil {
		c.auth = CephCLI{}
	}
	if c.run == nil {
		c.run = ExecRunner{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.kernel = KernelCephFS
	return c
}

// KernelCephFS reports whether this host mounts CephFS with the kernel
// client: the kernel lists ceph in /proc/filesystems and mount.ceph is
// installed. Otherwise (this CI's kernel has no ceph client, and no
// modules to load) hostctl mounts with ceph-fuse, which needs /dev/fuse.
func KernelCephFS() bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil || !slices.Contains(strings.Fields(string(b)), "ceph") {
		return false
	}
	for _, p := range []string{"/sbin/mount.ceph", "/usr/sbin/mount.ceph"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// cephxState is the record cephx/<host>.
type cephxState struct {
	AdminName   string              `json:"admin_name"`
	AdminSecret string              `json:"admin_secret"` // key manager secret UUID
	Mons        string              `json:"mons"`
	Current     int64               `json:"current"`
	Generations []cephxGen          `json:"generations"`
	Grants      map[string]cephPath `json:"grants,omitempty"` // share ID -> path
}

// cephxGen is one generation of the host's client.
type cephxGen struct {
	Gen         int64     `json:"generation"`
	Secret      string    `json:"secret"` // key manager secret UUID
	CephVersion string    `json:"ceph_version,omitempty"`
	Created     time.Time `json:"created"`
}

// cephPath is a granted share path.
type cephPath struct {
	FS   string `json:"fs,omitempty"`
	Path string `json:"path"`
}

// cephMount is the record cephx-mount/<host>/<share>.
type cephMount struct {
	Gen    int64  `json:"generation"`
	Client string `json:"client"`
}

const (
	cephxPrefix      = "cephx/"
	cephxMountPrefix = "cephx-mount/"
)

func (c *CephX) stateKey() string             { return cephxPrefix + c.host }
func (c *CephX) mountKey(share string) string { return cephxMountPrefix + c.host + "/" + share }

// ClientName is the entity of a generation of host's client.
func ClientName(host string, gen int64) string {
	return "client.vmeta-" + host + "." + strconv.FormatInt(gen, 10)
}

func (c *CephX) clientPrefix() string { return "client.vmeta-" + c.host + "." }

func (c *CephX) load(ctx context.Context) (cephxState, error) {
	st, _, err := store.GetJSON[cephxState](ctx, c.st, c.stateKey())
	if errors.Is(err, store.ErrNotFound) {
		return cephxState{}, ErrCephXNotConfigured
	}
	if err != nil {
		return cephxState{}, fmt.Errorf("cephx state: %w", err)
	}
	return st, nil
}

func (c *CephX) update(ctx context.Context, f func(*cephxState, bool) (bool, error)) (cephxState, error) {
	return store.UpdateJSON(ctx, c.st, c.stateKey(), f)
}

func (c *CephX) admin(ctx context.Context, st cephxState) (CephAdmin, error) {
	key, err := c.keys.Passphrase(ctx, st.AdminSecret)
	if err != nil {
		return CephAdmin{}, fmt.Errorf("the CephX admin key from the key manager: %w", err)
	}
	return CephAdmin{Mons: st.Mons, Name: st.AdminName, Key: key}, nil
}

var keyringSection = regexp.MustCompile(`^\[([A-Za-z0-9._-]+)\]$`)

// ParseKeyring reads the first client entity and its key of a keyring
// file's contents ([client.admin] key = …; other entities, such as mon.,
// are skipped). The error never contains the key.
func ParseKeyring(b []byte) (name string, key []byte, err error) {
	section, others := "", []string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if m := keyringSection.FindStringSubmatch(line); m != nil {
			if name != "" && len(key) > 0 {
				break
			}
			section = m[1]
			if strings.HasPrefix(section, "client.") && name == "" {
				name = section
			} else if !strings.HasPrefix(section, "client.") {
				others = append(others, section)
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && name != "" && section == name && strings.TrimSpace(k) == "key" {
			key = []byte(strings.TrimSpace(v))
		}
	}
	switch {
	case name == "" && len(others) > 0:
		return "", nil, fmt.Errorf("%w: keyring: no client entity (it has %s): the admin keyring must hold client.NAME", ErrCephInvalid, strings.Join(others, ", "))
	case name == "":
		return "", nil, fmt.Errorf("%w: keyring: no [client.NAME] section", ErrCephInvalid)
	case len(key) == 0:
		return "", nil, fmt.Errorf("%w: keyring: entity %s has no key", ErrCephInvalid, name)
	case !base64KeyRE.Match(key) || len(key) > 128:
		return "", nil, fmt.Errorf("%w: keyring: entity %s: the key is not base64 (not shown)", ErrCephInvalid, name)
	}
	return name, key, nil
}

var base64KeyRE = regexp.MustCompile(`^[A-Za-z0-9+/]+=*$`)

// Configured reports whether this host has an admin keyring.
func (c *CephX) Configured(ctx context.Context) bool {
	_, err := c.load(ctx)
	return err == nil
}

// ConfigureAdmin takes the admin keyring (the contents of the operator's
// file) and the monitors: the admin must authenticate (asked for the
// cluster's version) before anything is stored; then its key goes to the
// key manager, and the host's client is created at generation 1 unless
// it exists. Given again, it replaces the admin key (the old one is
// deleted from the key manager).
func (c *CephX) ConfigureAdmin(ctx context.Context, keyring []byte, mons string) (cephVersion string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name, key, err := ParseKeyring(keyring)
	if err != nil {
		return "", err
	}
	exp, err := ParseCephFSExport(mons + ":/")
	if err != nil {
		return "", fmt.Errorf("%w: mons %q: must be MON[,MON...] (host or host:port)", ErrCephInvalid, mons)
	}
	a := CephAdmin{Mons: exp.MonHost(), Name: name, Key: key}
	ver, err := c.auth.Version(ctx, a)
	if err != nil {
		return "", fmt.Errorf("%w: the admin keyring of %s does not authenticate with the monitors %s (nothing was changed): %w", ErrCephInvalid, name, a.Mons, err)
	}
	sec, err := c.keys.Create(ctx, keys.Request{Name: "ceph-admin." + c.host, ProjectID: CephKeysProject, Payload: key})
	if err != nil {
		return "", fmt.Errorf("store the admin key: %w", err)
	}
	var old string
	if _, err := c.update(ctx, func(st *cephxState, _ bool) (bool, error) {
		old = st.AdminSecret
		st.AdminName, st.AdminSecret, st.Mons = name, sec.UUID, a.Mons
		return true, nil
	}); err != nil {
		_ = c.keys.Delete(context.WithoutCancel(ctx), sec.UUID)
		return "", fmt.Errorf("record the admin key: %w", err)
	}
	if old != "" && old != sec.UUID {
		if err := c.keys.Delete(ctx, old); err != nil && !errors.Is(err, keys.ErrNotFound) {
			c.log.Warn("previous CephX admin key not deleted from the key manager", "secret", old, "err", err)
		}
	}
	c.log.Info("CephX admin configured", "admin", name, "ceph_version", ver)
	st, err := c.load(ctx)
	if err != nil {
		return "", err
	}
	if st.Current == 0 {
		if _, _, err := c.rotateTo(ctx, 1, 1); err != nil {
			return ver, fmt.Errorf("create the host's CephX client: %w", err)
		}
	}
	return ver, nil
}

// caps are the capabilities of the host's client for its grants.
func caps(grants map[string]cephPath) CephCaps {
	cc := CephCaps{Mon: "allow r"}
	var mds, osd []string
	seenFS := map[string]bool{}
	ids := make([]string, 0, len(grants))
	for id := range grants {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		g := grants[id]
		if g.FS != "" {
			mds = append(mds, "allow rw fsname="+g.FS+" path="+g.Path)
		} else {
			mds = append(mds, "allow rw path="+g.Path)
		}
		data := g.FS
		if data == "" {
			data = "*"
		}
		if !seenFS[data] {
			seenFS[data] = true
			osd = append(osd, "allow rw tag cephfs data="+data)
		}
	}
	slices.Sort(osd)
	mds = slices.Compact(mds)
	cc.MDS, cc.OSD = strings.Join(mds, ", "), strings.Join(osd, ", ")
	return cc
}

// Grant gives this host's client (every generation) access to a share's
// path: the grant is recorded first, then the capabilities set (Sync
// sets them again after a crash in between).
func (c *CephX) Grant(ctx context.Context, share string, exp CephFSExport) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.update(ctx, func(st *cephxState, exists bool) (bool, error) {
		if !exists {
			return false, ErrCephXNotConfigured
		}
		if g, ok := st.Grants[share]; ok && g == (cephPath{FS: exp.FS, Path: exp.Path}) {
			return false, nil
		}
		if st.Grants == nil {
			st.Grants = map[string]cephPath{}
		}
		st.Grants[share] = cephPath{FS: exp.FS, Path: exp.Path}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("grant share %s to %s: %w", share, c.clientPrefix()+"*", err)
	}
	if err := c.setCaps(ctx, st, st); err != nil {
		return fmt.Errorf("grant share %s: %w", share, err)
	}
	c.log.Info("CephX access granted", "share", share, "client", ClientName(c.host, st.Current))
	return nil
}

// Revoke takes a share's path away from every host's client (the share
// is held by no instance on any host any more). Hosts whose records do
// not have it are left alone.
func (c *CephX) Revoke(ctx context.Context, share string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	recs, err := c.st.Records(ctx, cephxPrefix)
	if err != nil {
		return fmt.Errorf("revoke share %s: %w", share, err)
	}
	granted := false
	for _, r := range recs {
		var st cephxState
		if json.Unmarshal(r.Value, &st) == nil {
			_, ok := st.Grants[share]
			granted = granted || ok
		}
	}
	if !granted {
		return nil
	}
	mine, err := c.load(ctx)
	if err != nil {
		return fmt.Errorf("revoke share %s: %w", share, err)
	}
	var errs []error
	for _, r := range recs {
		host := strings.TrimPrefix(r.Key, cephxPrefix)
		if strings.Contains(host, "/") {
			continue
		}
		var had bool
		st, err := store.UpdateJSON(ctx, c.st, r.Key, func(st *cephxState, exists bool) (bool, error) {
			_, had = st.Grants[share]
			if !exists || !had {
				return false, nil
			}
			delete(st.Grants, share)
			return true, nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", host, err))
			continue
		}
		if !had {
			continue
		}
		other := &CephX{host: host}
		if err := other.setCapsWith(ctx, c.auth, c.keys, mine, st); err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", host, err))
			continue
		}
		c.log.Info("CephX access revoked", "share", share, "host", host)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("revoke share %s: %w", share, err)
	}
	return nil
}

// setCaps sets the caps of st's grants on every generation of this host,
// as the admin of adm.
func (c *CephX) setCaps(ctx context.Context, adm, st cephxState) error {
	return c.setCapsWith(ctx, c.auth, c.keys, adm, st)
}

func (c *CephX) setCapsWith(ctx context.Context, auth CephAuth, km CephKeys, adm, st cephxState) error {
	a, err := (&CephX{keys: km}).admin(ctx, adm)
	if err != nil {
		return err
	}
	defer clear(a.Key)
	want := caps(st.Grants)
	for _, g := range st.Generations {
		if err := auth.SetCaps(ctx, a, ClientName(c.host, g.Gen), want); err != nil {
			return fmt.Errorf("caps of %s: %w", ClientName(c.host, g.Gen), err)
		}
	}
	return nil
}

// Sync sets the capabilities of every generation again from the grants
// (after a crash between a grant's record and its caps).
func (c *CephX) Sync(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.load(ctx)
	if err != nil {
		return err
	}
	return c.setCaps(ctx, st, st)
}

// Generation is the host client's newest generation (0: not configured).
func (c *CephX) Generation(ctx context.Context) (int64, error) {
	st, err := c.load(ctx)
	if errors.Is(err, ErrCephXNotConfigured) {
		return 0, nil
	}
	return st.Current, err
}

// RotateTo makes generation gen the newest: client.vmeta-<host>.<gen> is
// created with the grants' caps (or found, after a crash), its key put in
// the key manager (or found there by its name), and recorded as current;
// then prior generations beyond keep that no mount uses are deleted from
// Ceph and the key manager. Idempotent for a gen. It returns how many
// prior generations remain and the cluster's Ceph version.
func (c *CephX) RotateTo(ctx context.Context, gen int64, keep int) (prior int, cephVersion string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rotateTo(ctx, gen, keep)
}

// Step names of RotateTo, for fault injection in tests.
var cephxStep = func(string) error { return nil }

func (c *CephX) rotateTo(ctx context.Context, gen int64, keep int) (int, string, error) {
	st, err := c.load(ctx)
	if err != nil {
		return 0, "", err
	}
	a, err := c.admin(ctx, st)
	if err != nil {
		return 0, "", err
	}
	defer clear(a.Key)
	ver, err := c.auth.Version(ctx, a)
	if err != nil {
		return 0, "", fmt.Errorf("ceph version: %w", err)
	}
	if !slices.ContainsFunc(st.Generations, func(g cephxGen) bool { return g.Gen == gen }) && gen > st.Current {
		name := ClientName(c.host, gen)
		key, err := c.auth.Ensure(ctx, a, name, caps(st.Grants))
		if err != nil {
			return 0, "", fmt.Errorf("create %s: %w", name, err)
		}
		if err := cephxStep("created"); err != nil {
			return 0, "", err
		}
		sec, err := c.secretFor(ctx, name, key)
		clear(key)
		if err != nil {
			return 0, "", err
		}
		if err := cephxStep("stored"); err != nil {
			return 0, "", err
		}
		if st, err = c.update(ctx, func(st *cephxState, _ bool) (bool, error) {
			if slices.ContainsFunc(st.Generations, func(g cephxGen) bool { return g.Gen == gen }) {
				return false, nil
			}
			st.Generations = append(st.Generations, cephxGen{Gen: gen, Secret: sec, CephVersion: ver, Created: c.now().UTC()})
			slices.SortFunc(st.Generations, func(x, y cephxGen) int { return int(x.Gen - y.Gen) })
			st.Current = max(st.Current, gen)
			return true, nil
		}); err != nil {
			return 0, "", fmt.Errorf("record %s: %w", name, err)
		}
		c.log.Info("CephX client generation created", "client", name)
		if err := cephxStep("recorded"); err != nil {
			return 0, "", err
		}
	}
	prior, err := c.prune(ctx, a, keep)
	return prior, ver, err
}

// secretFor returns the key-manager secret holding the key of client
// name: one made before a crash (found by its name) or a new one.
func (c *CephX) secretFor(ctx context.Context, name string, key []byte) (string, error) {
	all, err := c.keys.List(ctx, CephKeysProject)
	if err != nil {
		return "", fmt.Errorf("list CephX keys: %w", err)
	}
	for _, s := range all {
		if s.Name != name {
			continue
		}
		have, err := c.keys.Passphrase(ctx, s.UUID)
		if err == nil && bytes.Equal(have, key) {
			clear(have)
			return s.UUID, nil
		}
		clear(have)
		// A stale secret of a client deleted and created again: it goes.
		if err := c.keys.Delete(ctx, s.UUID); err != nil && !errors.Is(err, keys.ErrNotFound) {
			return "", fmt.Errorf("delete stale key of %s: %w", name, err)
		}
	}
	sec, err := c.keys.Create(ctx, keys.Request{Name: name, ProjectID: CephKeysProject, Payload: key})
	if err != nil {
		return "", fmt.Errorf("store the key of %s: %w", name, err)
	}
	return sec.UUID, nil
}

// Prune deletes prior generations beyond keep that no mount on this host
// uses, and any generation Ceph has that the record does not (left by a
// crash before it was recorded) unless it is the one being made. It
// returns how many prior generations remain.
func (c *CephX) Prune(ctx context.Context, keep int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.load(ctx)
	if err != nil {
		return 0, err
	}
	a, err := c.admin(ctx, st)
	if err != nil {
		return 0, err
	}
	defer clear(a.Key)
	return c.prune(ctx, a, keep)
}

func (c *CephX) prune(ctx context.Context, a CephAdmin, keep int) (int, error) {
	st, err := c.load(ctx)
	if err != nil {
		return 0, err
	}
	used, err := c.usedGenerations(ctx)
	if err != nil {
		return 0, err
	}
	// Ceph's own list: a generation there and not in the record (created
	// before a crash, never recorded) and below the current one is
	// deleted; above it, it is the one a rotation in progress makes.
	names, err := c.auth.Clients(ctx, a, c.clientPrefix())
	if err != nil {
		return 0, fmt.Errorf("list %s*: %w", c.clientPrefix(), err)
	}
	recorded := map[string]bool{}
	for _, g := range st.Generations {
		recorded[ClientName(c.host, g.Gen)] = true
	}
	for _, n := range names {
		g, err := strconv.ParseInt(strings.TrimPrefix(n, c.clientPrefix()), 10, 64)
		if err != nil || recorded[n] || g >= st.Current {
			continue
		}
		if err := c.auth.Remove(ctx, a, n); err != nil {
			return 0, fmt.Errorf("delete unrecorded %s: %w", n, err)
		}
		c.log.Info("CephX client generation not recorded (left by a crash) deleted", "client", n)
	}
	var prior []cephxGen
	for _, g := range st.Generations {
		if g.Gen < st.Current {
			prior = append(prior, g)
		}
	}
	excess := len(prior) - keep
	for _, g := range prior {
		if excess <= 0 {
			break
		}
		if used[g.Gen] {
			continue
		}
		name := ClientName(c.host, g.Gen)
		if err := cephxStep("prune-remove"); err != nil {
			return 0, err
		}
		if err := c.auth.Remove(ctx, a, name); err != nil {
			return 0, fmt.Errorf("delete %s: %w", name, err)
		}
		if err := cephxStep("prune-removed"); err != nil {
			return 0, err
		}
		if _, err := c.update(ctx, func(st *cephxState, _ bool) (bool, error) {
			n := len(st.Generations)
			st.Generations = slices.DeleteFunc(st.Generations, func(x cephxGen) bool { return x.Gen == g.Gen })
			return len(st.Generations) != n, nil
		}); err != nil {
			return 0, fmt.Errorf("unrecord %s: %w", name, err)
		}
		if err := c.keys.Delete(ctx, g.Secret); err != nil && !errors.Is(err, keys.ErrNotFound) {
			c.log.Warn("key of a pruned CephX generation not deleted from the key manager", "client", name, "err", err)
		}
		c.log.Info("prior CephX client generation pruned", "client", name)
		excess--
	}
	st, err = c.load(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, g := range st.Generations {
		if g.Gen < st.Current {
			n++
		}
	}
	return n, nil
}

// usedGenerations are the generations this host's mounts were made with.
func (c *CephX) usedGenerations(ctx context.Context) (map[int64]bool, error) {
	recs, err := c.st.Records(ctx, cephxMountPrefix+c.host+"/")
	if err != nil {
		return nil, fmt.Errorf("CephFS mounts: %w", err)
	}
	out := map[int64]bool{}
	for _, r := range recs {
		var m cephMount
		if err := json.Unmarshal(r.Value, &m); err != nil {
			return nil, fmt.Errorf("CephFS mount %s: %w", r.Key, err)
		}
		out[m.Gen] = true
	}
	return out, nil
}

// MountGenerations returns, per share mounted on this host, the
// generation its mount was made with.
func (c *CephX) MountGenerations(ctx context.Context) (map[string]int64, error) {
	prefix := cephxMountPrefix + c.host + "/"
	recs, err := c.st.Records(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("CephFS mounts: %w", err)
	}
	out := map[string]int64{}
	for _, r := range recs {
		var m cephMount
		if err := json.Unmarshal(r.Value, &m); err != nil {
			return nil, fmt.Errorf("CephFS mount %s: %w", r.Key, err)
		}
		out[strings.TrimPrefix(r.Key, prefix)] = m.Gen
	}
	return out, nil
}

// Mount mounts a CephFS share at dir as the newest generation of the
// host's client, with ceph-fuse (or the kernel client, mount -t ceph,
// when the host has it: KernelCephFS): its keyring (for the kernel, a
// secret file) goes to a 0600 file in a fresh 0700 directory under the
// runtime directory, removed as soon as the mount returns (ceph-fuse and
// the kernel keep the key in memory). The generation is
// recorded before the mount.
func (c *CephX) Mount(ctx context.Context, share string, exp CephFSExport, dir string) error {
	st, err := c.load(ctx)
	if err != nil {
		return err
	}
	var gen *cephxGen
	for i := range st.Generations {
		if st.Generations[i].Gen == st.Current {
			gen = &st.Generations[i]
		}
	}
	if gen == nil {
		return fmt.Errorf("%w: no current CephX client generation", ErrCephXNotConfigured)
	}
	if g, ok := st.Grants[share]; !ok || g != (cephPath{FS: exp.FS, Path: exp.Path}) {
		// Mapped before the grant was recorded (a crash): grant now.
		if err := c.Grant(ctx, share, exp); err != nil {
			return err
		}
	}
	name := ClientName(c.host, gen.Gen)
	key, err := c.keys.Passphrase(ctx, gen.Secret)
	if err != nil {
		return fmt.Errorf("the key of %s from the key manager: %w", name, err)
	}
	defer clear(key)
	if err := os.MkdirAll(c.runDir, 0o700); err != nil {
		return fmt.Errorf("runtime directory: %w", err)
	}
	priv, err := os.MkdirTemp(c.runDir, "ceph-mount-")
	if err != nil {
		return fmt.Errorf("runtime directory: %w", err)
	}
	defer os.RemoveAll(priv)
	if err := os.Chmod(priv, 0o700); err != nil {
		return err
	}
	conf := filepath.Join(priv, "ceph.conf")
	if err := os.WriteFile(conf, []byte("[global]\n\tmon host = "+exp.MonHost()+"\n"), 0o600); err != nil {
		return fmt.Errorf("ceph.conf: %w", err)
	}
	// The key reaches the tool in a file of priv: the whole keyring for
	// ceph-fuse; for the kernel client, mount.ceph reads it from a file
	// holding only the key (secretfile=), never from an option.
	var (
		tool string
		args []string
	)
	if c.kernel() {
		sf := filepath.Join(priv, "secret")
		if err := os.WriteFile(sf, append(slices.Clone(key), '\n'), 0o600); err != nil {
			return fmt.Errorf("secret file: %w", err)
		}
		opts := "name=" + strings.TrimPrefix(name, "client.") + ",secretfile=" + sf + ",conf=" + conf
		if exp.FS != "" {
			opts += ",fs=" + exp.FS
		}
		tool, args = "mount", []string{"-t", "ceph", exp.MonHost() + ":" + exp.Path, dir, "-o", opts}
	} else {
		kr := filepath.Join(priv, "keyring")
		if err := writeKeyring(kr, name, key); err != nil {
			return err
		}
		tool, args = "ceph-fuse", []string{"-c", conf, "-n", name, "-k", kr, "-r", exp.Path}
		if exp.FS != "" {
			args = append(args, "--client_fs", exp.FS)
		}
		args = append(args, dir)
	}
	// Recorded before the mount (a crash after it must find the
	// generation in use), and only once nothing but the mount can fail.
	if _, err := store.UpdateJSON(ctx, c.st, c.mountKey(share), func(m *cephMount, _ bool) (bool, error) {
		*m = cephMount{Gen: gen.Gen, Client: name}
		return true, nil
	}); err != nil {
		return fmt.Errorf("record the CephFS mount of share %s: %w", share, err)
	}
	out, err := c.run.Run(ctx, tool, args...)
	if err != nil {
		_ = c.st.DeleteRecord(context.WithoutCancel(ctx), c.mountKey(share), -1)
		return fmt.Errorf("%s as %s: %w: %s", tool, name, err, redact(cephFuseOutput(out), exp.String()))
	}
	c.log.Info("CephFS share mounted", "share", share, "client", name)
	return nil
}

// Unmounted forgets the mount record of a share (after its unmount).
func (c *CephX) Unmounted(ctx context.Context, share string) {
	if err := c.st.DeleteRecord(ctx, c.mountKey(share), -1); err != nil && !errors.Is(err, store.ErrNotFound) {
		c.log.Warn("CephFS mount record not deleted", "share", share, "err", err)
	}
}

// cephFuseOutput keeps the lines of ceph-fuse's output that say what
// went wrong (it prints its start-up chatter too).
func cephFuseOutput(out []byte) []byte {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.Contains(l, "starting ceph client") || strings.Contains(l, "init, newargv") {
			continue
		}
		keep = append(keep, l)
	}
	return []byte(strings.Join(keep, "; "))
}

func writeKeyring(p, name string, key []byte) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("keyring file: %w", err)
	}
	_, err = fmt.Fprintf(f, "[%s]\n\tkey = %s\n", name, key)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("keyring file: %w", err)
	}
	return nil
}

// PriorHolders lists the instances whose share mounts on this host use
// a generation below the newest (keyrotation.CephXClient).
func (c *CephX) PriorHolders(ctx context.Context) ([]keyrotation.Holder, error) {
	st, err := c.load(ctx)
	if errors.Is(err, ErrCephXNotConfigured) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	gens, err := c.MountGenerations(ctx)
	if err != nil {
		return nil, err
	}
	var out []keyrotation.Holder
	for share, g := range gens {
		if g >= st.Current {
			continue
		}
		var users []string
		if c.users != nil {
			users = c.users(share)
		}
		if len(users) == 0 {
			users = []string{""} // mounted, no instance known (yet)
		}
		for _, u := range users {
			out = append(out, keyrotation.Holder{InstanceUUID: u, Share: share, Generation: g, Client: ClientName(c.host, g)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Share != out[j].Share {
			return out[i].Share < out[j].Share
		}
		return out[i].InstanceUUID < out[j].InstanceUUID
	})
	return out, nil
}

// CephVersion is the cluster's version, asked as the admin ("" when the
// host has no admin keyring or the cluster does not answer).
func (c *CephX) CephVersion(ctx context.Context) string {
	st, err := c.load(ctx)
	if err != nil {
		return ""
	}
	a, err := c.admin(ctx, st)
	if err != nil {
		return ""
	}
	defer clear(a.Key)
	v, err := c.auth.Version(ctx, a)
	if err != nil {
		c.log.Warn("ceph version not known", "err", err)
		return ""
	}
	return v
}

// ---- the ceph CLI ----

// CephCLI is CephAuth through the ceph CLI (ceph-common): every call gets
// a private 0700 directory with a ceph.conf naming the monitors and the
// admin's keyring in a 0600 file (never a key on the command line),
// removed when the call returns.
type CephCLI struct {
	// Bin is the ceph binary ("ceph" from PATH when empty).
	Bin string
	// Dir is where the private directories go (os.TempDir when empty).
	Dir string
}

func (c CephCLI) cmd(ctx context.Context, a CephAdmin, args ...string) ([]byte, error) {
	priv, err := os.MkdirTemp(c.Dir, "vmeta-ceph-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(priv)
	conf := filepath.Join(priv, "ceph.conf")
	if err := os.WriteFile(conf, []byte("[global]\n\tmon host = "+a.Mons+"\n\tlog file = /dev/null\n\tadmin socket =\n"), 0o600); err != nil {
		return nil, err
	}
	kr := filepath.Join(priv, "keyring")
	if err := writeKeyring(kr, a.Name, a.Key); err != nil {
		return nil, err
	}
	bin := c.Bin
	if bin == "" {
		bin = "ceph"
	}
	full := append([]string{"-c", conf, "-n", a.Name, "-k", kr, "--connect-timeout", "15", "--format", "json"}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &CephError{Args: args, Err: err, Stderr: strings.TrimSpace(stderr.String())}
	}
	return stdout.Bytes(), nil
}

// CephError is a failed ceph command (its arguments never hold a key).
type CephError struct {
	Args   []string
	Err    error
	Stderr string
}

// Error names the command up to its entity: the capabilities after it
// name share paths, which are part of the admin-only export locations.
func (e *CephError) Error() string {
	args := e.Args
	if len(args) > 3 {
		args = append(slices.Clone(args[:3]), "(capabilities not shown)")
	}
	return fmt.Sprintf("ceph %s: %v: %s", strings.Join(args, " "), e.Err, e.Stderr)
}

func (e *CephError) Unwrap() error { return e.Err }

// notFound reports whether a ceph command failed with ENOENT.
func notFound(err error) bool {
	var ce *CephError
	var ee *exec.ExitError
	return errors.As(err, &ce) && errors.As(ce.Err, &ee) && ee.ExitCode() == 2
}

type authEntry struct {
	Entity string            `json:"entity"`
	Key    string            `json:"key"`
	Caps   map[string]string `json:"caps"`
}

func capArgs(cc CephCaps) []string {
	out := []string{"mon", cc.Mon}
	if cc.MDS != "" {
		out = append(out, "mds", cc.MDS)
	}
	if cc.OSD != "" {
		out = append(out, "osd", cc.OSD)
	}
	return out
}

// Ensure implements CephAuth.
func (c CephCLI) Ensure(ctx context.Context, a CephAdmin, client string, cc CephCaps) ([]byte, error) {
	out, err := c.cmd(ctx, a, "auth", "get", client)
	switch {
	case notFound(err):
		out, err = c.cmd(ctx, a, append([]string{"auth", "get-or-create", client}, capArgs(cc)...)...)
		if err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		if err := c.SetCaps(ctx, a, client, cc); err != nil {
			return nil, err
		}
	}
	var es []authEntry
	if err := json.Unmarshal(out, &es); err != nil || len(es) == 0 || es[0].Key == "" {
		return nil, fmt.Errorf("ceph auth get %s: no key in its answer", client)
	}
	return []byte(es[0].Key), nil
}

// SetCaps implements CephAuth.
func (c CephCLI) SetCaps(ctx context.Context, a CephAdmin, client string, cc CephCaps) error {
	_, err := c.cmd(ctx, a, append([]string{"auth", "caps", client}, capArgs(cc)...)...)
	return err
}

// Remove implements CephAuth.
func (c CephCLI) Remove(ctx context.Context, a CephAdmin, client string) error {
	_, err := c.cmd(ctx, a, "auth", "rm", client)
	if notFound(err) {
		return nil
	}
	return err
}

// Clients implements CephAuth.
func (c CephCLI) Clients(ctx context.Context, a CephAdmin, prefix string) ([]string, error) {
	out, err := c.cmd(ctx, a, "auth", "ls")
	if err != nil {
		return nil, err
	}
	var ls struct {
		AuthDump []authEntry `json:"auth_dump"`
	}
	if err := json.Unmarshal(out, &ls); err != nil {
		return nil, fmt.Errorf("ceph auth ls: %w", err)
	}
	var names []string
	for _, e := range ls.AuthDump {
		if strings.HasPrefix(e.Entity, prefix) {
			names = append(names, e.Entity)
		}
	}
	sort.Strings(names)
	return names, nil
}

var cephVersionRE = regexp.MustCompile(`ceph version ([0-9]+\.[0-9]+\.[0-9]+)`)

// Version implements CephAuth: the monitors' version (`ceph version`).
func (c CephCLI) Version(ctx context.Context, a CephAdmin) (string, error) {
	out, err := c.cmd(ctx, a, "version")
	if err != nil {
		return "", err
	}
	m := cephVersionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("ceph version: unexpected answer %q", out)
	}
	return string(m[1]), nil
}

// FileSystems implements CephAuth.
func (c CephCLI) FileSystems(ctx context.Context, a CephAdmin) ([]string, error) {
	out, err := c.cmd(ctx, a, "fs", "ls")
	if err != nil {
		return nil, err
	}
	var fs []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(out, &fs); err != nil {
		return nil, fmt.Errorf("ceph fs ls: %w", err)
	}
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	return names, nil
}

// CheckFS refuses a file system the cluster does not have (when the host
// has an admin keyring; otherwise the mount says so).
func (c *CephX) CheckFS(ctx context.Context, fs string) error {
	if fs == "" {
		return nil
	}
	st, err := c.load(ctx)
	if err != nil {
		return nil //nolint:nilerr // not configured: checked at mount
	}
	a, err := c.admin(ctx, st)
	if err != nil {
		return err
	}
	defer clear(a.Key)
	names, err := c.auth.FileSystems(ctx, a)
	if err != nil {
		return fmt.Errorf("ceph fs ls: %w", err)
	}
	if !slices.Contains(names, fs) {
		return field("export_location", "fs="+fs, "the Ceph cluster has no file system %q (it has: %s)", fs, strings.Join(names, ", "))
	}
	return nil
}

var _ keyrotation.CephXClient = (*CephX)(nil)
