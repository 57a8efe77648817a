package virt

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/vmeta/vmeta/internal/errkind"
)

// DefaultURI is the libvirt URI hostctl uses unless told otherwise.
const DefaultURI = "qemu:///system"

// DefaultSocket is libvirtd's socket for qemu:///system.
const DefaultSocket = "/run/libvirt/libvirt-sock"

// Sentinel errors; every error from Conn that stems from one wraps it.
var (
	// ErrUnreachable: libvirtd does not answer (not running, socket gone,
	// connection lost while the call was in flight).
	ErrUnreachable = errkind.New(errkind.Unavailable, "libvirtd unreachable")
	// ErrNotFound: no such domain or network.
	ErrNotFound = errkind.New(errkind.NotFound, "not found")
	// ErrConflict: a DHCP host entry for the MAC or IP exists with other
	// values.
	ErrConflict = errkind.New(errkind.Conflict, "conflict")
	// ErrClosed: the Conn was closed.
	ErrClosed = errors.New("libvirt connection closed")
)

// UnreachableError says which libvirtd could not be reached and why.
type UnreachableError struct {
	// Where is the socket path (unix transport) or the URI.
	Where string
	Err   error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("libvirtd at %s is unreachable: %v", e.Where, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnreachable) (and its kind) true.
func (e *UnreachableError) Is(target error) bool { return errors.Is(ErrUnreachable, target) }

// libvirtError keeps libvirt's message and adds a sentinel for errors.Is.
type libvirtError struct {
	kind error
	err  error
}

func (e *libvirtError) Error() string   { return e.err.Error() }
func (e *libvirtError) Unwrap() []error { return []error{e.kind, e.err} }

// Defaults of ConnOptions.
const (
	// DefaultDialTimeout bounds one connection attempt to libvirtd.
	DefaultDialTimeout = 5 * time.Second
	// DefaultMinBackoff is the first wait before reconnecting; it doubles
	// (with jitter) up to DefaultMaxBackoff while libvirtd stays away.
	DefaultMinBackoff = 100 * time.Millisecond
	// DefaultMaxBackoff is the longest wait between reconnection attempts.
	DefaultMaxBackoff = 5 * time.Second
	// DefaultEventBuffer is the capacity of the Events channel.
	DefaultEventBuffer = 64
)

// ConnOptions configure a Conn. The zero value connects to qemu:///system
// over /run/libvirt/libvirt-sock.
type ConnOptions struct {
	// Socket overrides the unix socket path (also settable as ?socket= in
	// the URI).
	Socket string
	// DialTimeout bounds one connection attempt; DefaultDialTimeout
	// when 0.
	DialTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts (doubling, with jitter); DefaultMinBackoff and
	// DefaultMaxBackoff when 0.
	MinBackoff, MaxBackoff time.Duration
	// Events subscribes to domain lifecycle and device events (again after
	// every reconnect) and delivers them on Events(). The caller must then
	// keep reading Events(): delivery blocks, nothing is dropped.
	Events bool
	// EventBuffer is the capacity of the Events channel;
	// DefaultEventBuffer when 0.
	EventBuffer int
	// Logger receives connection state changes; slog.Default() when nil.
	Logger *slog.Logger
}

// Conn is a connection to libvirtd that survives libvirtd restarts:
// go-libvirt neither reconnects nor re-registers event callbacks, so Conn
// watches Disconnected(), dials again with backoff, re-subscribes and
// reports both transitions as events. Calls made while disconnected fail at
// once with an *UnreachableError; none is retried (a retried define or
// attach could apply twice). Conn is safe for concurrent use.
type Conn struct {
	uri    *url.URL
	where  string
	opts   ConnOptions
	log    *slog.Logger
	events chan Event

	mu      sync.Mutex
	l       *libvirt.Libvirt
	lastErr error // why the current connection is down
	// updateOrder: whether libvirtd's connection of client takes
	// NetworkUpdate's arguments in the corrected order (network.go).
	updateOrder struct {
		of      *libvirt.Libvirt
		correct bool
	}

	rpcs atomic.Int64 // RPC packets sent (rpccount.go)

	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Connect connects to libvirtd at uri ("" is qemu:///system; qemu+unix,
// test:///default through the daemon, qemu+tcp, qemu+tls and qemu+ssh as
// go-libvirt supports them) and, if opts.Events, subscribes to domain
// events. ctx bounds this first attempt only; an unreachable libvirtd is an
// *UnreachableError naming the socket. The connection lives until Close.
func Connect(ctx context.Context, uri string, opts ConnOptions) (*Conn, error) {
	if uri == "" {
		uri = DefaultURI
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("libvirt URI %q: %w", uri, err)
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.MinBackoff == 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.EventBuffer == 0 {
		opts.EventBuffer = DefaultEventBuffer
	}
	c := &Conn{uri: u, opts: opts, log: opts.Logger, closing: make(chan struct{})}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.log = c.log.With("libvirt", uri)
	c.where = c.describe()
	if opts.Events {
		c.events = make(chan Event, opts.EventBuffer)
	}

	type result struct {
		l   *libvirt.Libvirt
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.dial()
		done <- result{l, err}
	}()
	var l *libvirt.Libvirt
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		l = r.l
	case <-ctx.Done():
		go func() { // do not leak a connection made after giving up
			if r := <-done; r.l != nil {
				_ = r.l.Disconnect()
			}
		}()
		return nil, &UnreachableError{Where: c.where, Err: ctx.Err()}
	}
	c.l = l
	c.wg.Add(1)
	go c.watch()
	return c, nil
}

// describe names the daemon for error messages: the socket path for the
// unix transport, else the URI.
func (c *Conn) describe() string {
	if c.isUnix() {
		return c.socketPath()
	}
	return c.uri.String()
}

func (c *Conn) isUnix() bool {
	scheme := strings.SplitN(c.uri.Scheme, "+", 2)
	return (len(scheme) == 1 && c.uri.Host == "") || (len(scheme) == 2 && scheme[1] == "unix")
}

func (c *Conn) socketPath() string {
	if c.opts.Socket != "" {
		return c.opts.Socket
	}
	if s := c.uri.Query().Get("socket"); s != "" {
		return s
	}
	return DefaultSocket
}

// dial makes one connection (a fresh go-libvirt client each time, so no
// state of a dead connection is reused) and subscribes to events.
func (c *Conn) dial() (*libvirt.Libvirt, error) {
	var l *libvirt.Libvirt
	if c.isUnix() {
		l = libvirt.NewWithDialer(countingDialer{dialers.NewLocal(
			dialers.WithSocket(c.socketPath()),
			dialers.WithLocalTimeout(c.opts.DialTimeout)), &c.rpcs})
		if err := l.ConnectToURI(libvirt.RemoteURI(c.uri)); err != nil {
			return nil, &UnreachableError{Where: c.where, Err: err}
		}
	} else {
		var err error
		if l, err = libvirt.ConnectToURI(c.uri); err != nil {
			return nil, &UnreachableError{Where: c.where, Err: err}
		}
	}
	if c.opts.Events {
		if err := c.subscribe(l); err != nil {
			_ = l.Disconnect()
			return nil, fmt.Errorf("libvirtd at %s: subscribe to domain events: %w", c.where, err)
		}
	}
	return l, nil
}

// subscribedEvents are the domain event IDs a Conn listens to.
var subscribedEvents = []libvirt.DomainEventID{
	libvirt.DomainEventIDLifecycle,
	libvirt.DomainEventIDDeviceRemoved,
	libvirt.DomainEventIDDeviceAdded,
	libvirt.DomainEventIDDeviceRemovalFailed,
}

// subscribe registers the event callbacks on l and forwards their events
// until l's connection ends. The subscriptions are never cancelled on their
// own: go-libvirt can deadlock when an event arrives for a stream that is
// being torn down, so they end only with the connection.
func (c *Conn) subscribe(l *libvirt.Libvirt) error {
	for _, id := range subscribedEvents {
		ch, err := l.SubscribeEvents(context.Background(), id, nil)
		if err != nil {
			return fmt.Errorf("event %d: %w", id, err)
		}
		c.wg.Add(1)
		go c.forward(ch)
	}
	return nil
}

// forward relays one subscription's events. After Close it keeps draining
// (go-libvirt blocks until its channel is read) and drops them.
func (c *Conn) forward(ch <-chan any) {
	defer c.wg.Done()
	for raw := range ch {
		ev, ok := convertEvent(raw)
		if !ok {
			continue
		}
		c.emit(ev)
	}
}

func (c *Conn) emit(ev Event) {
	if c.events == nil {
		return
	}
	select {
	case <-c.closing:
		return
	default:
	}
	select {
	case c.events <- ev:
	case <-c.closing:
	}
}

// watch waits for the connection to drop and reconnects, until Close.
func (c *Conn) watch() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		l := c.l
		c.mu.Unlock()
		select {
		case <-c.closing:
			return
		case <-l.Disconnected():
		}
		select {
		case <-c.closing:
			return
		default:
		}
		c.mu.Lock()
		c.lastErr = errors.New("connection lost; reconnecting")
		c.mu.Unlock()
		c.log.Warn("libvirtd connection lost; reconnecting", "socket", c.where)
		c.emit(Event{Kind: EventDisconnected})

		start := time.Now()
		backoff := c.opts.MinBackoff
		for attempt := 1; ; attempt++ {
			// Full jitter over [backoff/2, backoff).
			wait := backoff/2 + rand.N(backoff/2+1)
			select {
			case <-c.closing:
				return
			case <-time.After(wait):
			}
			nl, err := c.dial()
			if err != nil {
				c.mu.Lock()
				c.lastErr = fmt.Errorf("reconnecting since %s (attempt %d): %w", start.Format(time.RFC3339), attempt, unwrapUnreachable(err))
				c.mu.Unlock()
				c.log.Debug("libvirtd reconnect failed", "attempt", attempt, "err", err)
				backoff = min(2*backoff, c.opts.MaxBackoff)
				continue
			}
			c.mu.Lock()
			select {
			case <-c.closing:
				c.mu.Unlock()
				_ = nl.Disconnect()
				return
			default:
			}
			c.l, c.lastErr = nl, nil
			c.mu.Unlock()
			c.log.Info("libvirtd connection restored", "attempts", attempt, "after", time.Since(start).Round(time.Millisecond))
			c.emit(Event{Kind: EventReconnected})
			break
		}
	}
}

func unwrapUnreachable(err error) error {
	var u *UnreachableError
	if errors.As(err, &u) {
		return u.Err
	}
	return err
}

// Close disconnects, stops reconnecting and closes Events(). It waits for
// the event goroutines to finish.
func (c *Conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		close(c.closing)
		l := c.l
		c.mu.Unlock()
		if l != nil && l.IsConnected() {
			err = l.Disconnect()
		}
		c.wg.Wait()
		if c.events != nil {
			close(c.events)
		}
	})
	if err != nil {
		return fmt.Errorf("disconnect from libvirtd at %s: %w", c.where, err)
	}
	return nil
}

// Events delivers domain events, and EventDisconnected/EventReconnected
// when the connection drops and comes back (events in between are lost:
// reconcile after EventReconnected). It is nil unless ConnOptions.Events,
// and closed by Close.
func (c *Conn) Events() <-chan Event { return c.events }

// Connected reports whether the connection to libvirtd is up now (false
// while it reconnects and after Close).
func (c *Conn) Connected() bool {
	_, err := c.client()
	return err == nil
}

// client returns the live go-libvirt client, or why there is none.
func (c *Conn) client() (*libvirt.Libvirt, error) {
	select {
	case <-c.closing:
		return nil, ErrClosed
	default:
	}
	c.mu.Lock()
	l, why := c.l, c.lastErr
	c.mu.Unlock()
	if l == nil || !l.IsConnected() {
		if why == nil {
			why = errors.New("connection lost")
		}
		return nil, &UnreachableError{Where: c.where, Err: why}
	}
	return l, nil
}

// call runs f on the live client and wraps its error with op and what.
func (c *Conn) call(ctx context.Context, op, what string, f func(l *libvirt.Libvirt) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, what, err)
	}
	l, err := c.client()
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, what, err)
	}
	if err := f(l); err != nil {
		if !l.IsConnected() && !errors.Is(err, libvirt.ErrInterrupted) {
			// The connection died under the call (EPIPE, EOF, ...).
			err = &UnreachableError{Where: c.where, Err: err}
		}
		return fmt.Errorf("%s %s: %w", op, what, c.classify(err))
	}
	return nil
}

// isOperationInvalid: libvirt refused an operation the domain's state does
// not allow (destroying a domain that is not running).
func isOperationInvalid(err error) bool {
	var le libvirt.Error
	return errors.As(err, &le) && libvirt.ErrorNumber(le.Code) == libvirt.ErrOperationInvalid
}

// classify attaches a sentinel to a go-libvirt error.
func (c *Conn) classify(err error) error {
	var le libvirt.Error
	switch {
	case errors.Is(err, ErrUnreachable):
		return err
	case errors.Is(err, libvirt.ErrInterrupted):
		return &UnreachableError{Where: c.where, Err: err}
	case errors.As(err, &le):
		switch libvirt.ErrorNumber(le.Code) {
		case libvirt.ErrNoDomain, libvirt.ErrNoNetwork:
			return &libvirtError{kind: ErrNotFound, err: err}
		}
	}
	return err
}

// Domain identifies a libvirt domain.
type Domain struct {
	Name string
	UUID string
	// ID is the running domain's id, -1 when it is not running.
	ID int32
}

func toDomain(d libvirt.Domain) Domain {
	return Domain{Name: d.Name, UUID: formatUUID(d.UUID), ID: d.ID}
}

func formatUUID(u libvirt.UUID) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func domainWhat(name string) string { return "domain " + name }

// Lookup finds a domain by name.
func (c *Conn) Lookup(ctx context.Context, name string) (Domain, error) {
	var d libvirt.Domain
	err := c.call(ctx, "look up", domainWhat(name), func(l *libvirt.Libvirt) (err error) {
		d, err = l.DomainLookupByName(name)
		return err
	})
	return toDomain(d), err
}

// List returns every domain libvirt knows (defined or running).
func (c *Conn) List(ctx context.Context) ([]Domain, error) {
	var ds []libvirt.Domain
	err := c.call(ctx, "list", "domains", func(l *libvirt.Libvirt) (err error) {
		ds, _, err = l.ConnectListAllDomains(1, libvirt.ConnectListDomainsActive|libvirt.ConnectListDomainsInactive)
		return err
	})
	out := make([]Domain, len(ds))
	for i, d := range ds {
		out[i] = toDomain(d)
	}
	return out, err
}

// Define defines (or redefines) the domain described by domainXML; libvirt
// validates it against its schema first.
func (c *Conn) Define(ctx context.Context, domainXML []byte) (Domain, error) {
	var d libvirt.Domain
	err := c.call(ctx, "define", domainWhat(xmlName(domainXML)), func(l *libvirt.Libvirt) (err error) {
		d, err = l.DomainDefineXMLFlags(string(domainXML), libvirt.DomainDefineValidate)
		return err
	})
	return toDomain(d), err
}

// xmlName is the name of the domain domainXML describes: its root's
// <name> child, found by reading the document up to it (near its top),
// not the whole of it (every define names its domain).
func xmlName(domainXML []byte) string {
	dec := xml.NewDecoder(bytes.NewReader(domainXML))
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return "(unnamed)"
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth++; depth == 2 && t.Name.Local == "name" {
				var name string
				if dec.DecodeElement(&name, &t) != nil || name == "" {
					return "(unnamed)"
				}
				return name
			}
		case xml.EndElement:
			depth--
		}
	}
}

// withDomain looks name up and runs f on it, wrapping errors with op.
func (c *Conn) withDomain(ctx context.Context, op, name string, f func(l *libvirt.Libvirt, d libvirt.Domain) error) error {
	return c.call(ctx, op, domainWhat(name), func(l *libvirt.Libvirt) error {
		d, err := l.DomainLookupByName(name)
		if err != nil {
			return err
		}
		return f(l, d)
	})
}

// Start boots a defined domain.
func (c *Conn) Start(ctx context.Context, name string) error {
	return c.withDomain(ctx, "start", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		return l.DomainCreate(d)
	})
}

// Shutdown asks the guest to power off (ACPI); it returns at once, and the
// guest may ignore the request (EventStopped tells when it is off).
func (c *Conn) Shutdown(ctx context.Context, name string) error {
	return c.withDomain(ctx, "shut down", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		return l.DomainShutdown(d)
	})
}

// Reboot asks a running domain's guest to reboot (libvirt's default
// method: ACPI, or the guest agent) and returns at once; the domain's
// QEMU process, and so its devices, stay.
func (c *Conn) Reboot(ctx context.Context, name string) error {
	return c.withDomain(ctx, "reboot", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		return l.DomainReboot(d, 0)
	})
}

// Destroy stops a running domain at once (power off).
func (c *Conn) Destroy(ctx context.Context, name string) error {
	return c.withDomain(ctx, "destroy", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		return l.DomainDestroy(d)
	})
}

// undefineFlags remove what libvirt keeps beside the definition: managed
// save image, snapshot and checkpoint metadata, UEFI variables.
const undefineFlags = libvirt.DomainUndefineManagedSave | libvirt.DomainUndefineSnapshotsMetadata |
	libvirt.DomainUndefineNvram | libvirt.DomainUndefineCheckpointsMetadata

// Remove destroys the domain if it runs and undefines it; a domain that
// does not exist is not an error.
func (c *Conn) Remove(ctx context.Context, name string) error {
	err := c.withDomain(ctx, "remove", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		// Destroy without asking first whether it runs: a guest may power
		// itself off in between. "Not running" is what Remove wants.
		if err := l.DomainDestroy(d); err != nil && !libvirt.IsNotFound(err) && !isOperationInvalid(err) {
			return fmt.Errorf("destroy: %w", err)
		}
		if err := l.DomainUndefineFlags(d, undefineFlags); err != nil && !libvirt.IsNotFound(err) {
			return fmt.Errorf("undefine: %w", err)
		}
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// State is a domain's state as libvirt names it.
type State string

// Domain states.
const (
	StateNoState     State = "nostate"
	StateRunning     State = "running"
	StateBlocked     State = "blocked"
	StatePaused      State = "paused"
	StateShutdown    State = "shutdown" // shutting down
	StateShutoff     State = "shutoff"
	StateCrashed     State = "crashed"
	StatePMSuspended State = "pmsuspended"
)

var states = map[libvirt.DomainState]State{
	libvirt.DomainNostate: StateNoState, libvirt.DomainRunning: StateRunning,
	libvirt.DomainBlocked: StateBlocked, libvirt.DomainPaused: StatePaused,
	libvirt.DomainShutdown: StateShutdown, libvirt.DomainShutoff: StateShutoff,
	libvirt.DomainCrashed: StateCrashed, libvirt.DomainPmsuspended: StatePMSuspended,
}

// State returns the domain's state.
func (c *Conn) State(ctx context.Context, name string) (State, error) {
	var st int32
	err := c.withDomain(ctx, "get state of", name, func(l *libvirt.Libvirt, d libvirt.Domain) (err error) {
		st, _, err = l.DomainGetState(d, 0)
		return err
	})
	if err != nil {
		return "", err
	}
	if s, ok := states[libvirt.DomainState(st)]; ok {
		return s, nil
	}
	return State(fmt.Sprintf("state-%d", st)), nil
}

// XML returns the domain's XML: the running configuration when live (for
// a domain that is not running libvirt returns the inactive one), else the
// persistent (inactive) definition. Device addresses are in both.
func (c *Conn) XML(ctx context.Context, name string, live bool) ([]byte, error) {
	var flags libvirt.DomainXMLFlags
	if !live {
		flags = libvirt.DomainXMLInactive
	}
	var s string
	err := c.withDomain(ctx, "get XML of", name, func(l *libvirt.Libvirt, d libvirt.Domain) (err error) {
		s, err = l.DomainGetXMLDesc(d, flags)
		return err
	})
	return []byte(s), err
}

// Affect selects which configuration a device change applies to.
type Affect uint32

const (
	// AffectLive changes the running domain (hot-plug).
	AffectLive = Affect(libvirt.DomainDeviceModifyLive)
	// AffectConfig changes the persistent definition.
	AffectConfig = Affect(libvirt.DomainDeviceModifyConfig)
	// AffectForce forces a change the guest could hold up: with
	// UpdateDevice, it swaps a cdrom's medium even while the guest keeps
	// the tray locked (Linux locks it while the drive is open), as `virsh
	// change-media --force` does.
	AffectForce = Affect(libvirt.DomainDeviceModifyForce)
)

func (a Affect) String() string {
	var parts []string
	if a&AffectLive != 0 {
		parts = append(parts, "live")
	}
	if a&AffectConfig != 0 {
		parts = append(parts, "config")
	}
	if a&AffectForce != 0 {
		parts = append(parts, "force")
	}
	if len(parts) == 0 {
		return "current"
	}
	return strings.Join(parts, "+")
}

// AttachDevice adds a device (DiskDeviceXML, NICDeviceXML, ShareDeviceXML)
// to the domain, live and/or in its definition. libvirt assigns its
// address at once; read it back with XML.
func (c *Conn) AttachDevice(ctx context.Context, name string, deviceXML []byte, affect Affect) error {
	return c.withDomain(ctx, "attach device ("+affect.String()+") to", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		return l.DomainAttachDeviceFlags(d, string(deviceXML), uint32(affect))
	})
}

// DetachDevice removes the device described by deviceXML (matched by
// libvirt: target dev, MAC, alias, address). A live detach of a PCI device
// needs the guest to cooperate and completes asynchronously: it is done
// when EventDeviceRemoved arrives for the alias (a guest without an OS
// never completes it); SCSI disks go at once.
func (c *Conn) DetachDevice(ctx context.Context, name string, deviceXML []byte, affect Affect) error {
	return c.withDomain(ctx, "detach device ("+affect.String()+") from", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		return l.DomainDetachDeviceFlags(d, string(deviceXML), uint32(affect))
	})
}

// UpdateDevice changes a device in place (libvirt matches it by target
// dev, MAC or alias). vmeta uses it to swap the config drive cdrom's
// medium (ConfigDriveMediaXML) on a running domain, live and forced.
func (c *Conn) UpdateDevice(ctx context.Context, name string, deviceXML []byte, affect Affect) error {
	return c.withDomain(ctx, "update device ("+affect.String()+") of", name, func(l *libvirt.Libvirt, d libvirt.Domain) error {
		return l.DomainUpdateDeviceFlags(d, string(deviceXML), libvirt.DomainDeviceModifyFlags(affect))
	})
}

// Version returns libvirtd's version (e.g. "9.0.0").
func (c *Conn) Version(ctx context.Context) (string, error) {
	var v uint64
	err := c.call(ctx, "get", "version", func(l *libvirt.Libvirt) (err error) {
		v, err = l.ConnectGetLibVersion()
		return err
	})
	return fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000), err
}
