package migrate

// The host-to-host channel (issue 24 item 5): mutual TLS between the
// hosts of one store, each host's certificate pinned through the store.
//
// Each host makes an ECDSA P-256 key and a self-signed certificate naming
// it in its data directory (host-channel/, the key 0600) and publishes
// the certificate and the address it listens on in the store
// ("hostchannel/<host>"). A client pins the server: the certificate the
// server presents must be, byte for byte, the one the store publishes
// for the host it dialled, and not expired. A server pins the client the
// same way: the client's certificate must be one the store publishes, of
// a host whose heartbeat is fresh, and not expired; and every request is
// checked against the store's move record: a host accepts a move only
// from the host the record names as its source, for an instance the
// record says is moving to it, in a state that calls for the request.
// TLS 1.3 only: passphrases and disk images (a LUKS disk's ciphertext)
// are encrypted in transit. No passphrase is logged or put in an error.
//
// Not done here: the certificate's rotation as a key class of the
// key-rotation engine (a host makes a new certificate when its own has
// less than a tenth of its life left, at its next start).

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

// ChannelDir is the directory of a host's channel key and certificate in
// its data directory.
const ChannelDir = "host-channel"

// certLife is how long a host certificate is valid.
const certLife = 365 * 24 * time.Hour

// channelPrefix names the published channel records.
const channelPrefix = "hostchannel/"

// ChannelRecord is a host's channel as published in the store.
type ChannelRecord struct {
	Host    string    `json:"host"`
	Address string    `json:"address"`
	Cert    []byte    `json:"cert"` // PEM
	Updated time.Time `json:"updated"`
}

// Identity is this host's channel key and certificate.
type Identity struct {
	Host string
	Cert tls.Certificate
	DER  []byte
}

// LoadIdentity reads this host's channel key and certificate from
// dataDir, making them on the first start (and again when the
// certificate has less than a tenth of its life left).
func LoadIdentity(dataDir, host string, now time.Time) (*Identity, error) {
	dir := filepath.Join(dataDir, ChannelDir)
	keyPath, certPath := filepath.Join(dir, "key.pem"), filepath.Join(dir, "cert.pem")
	id, err := readIdentity(host, keyPath, certPath)
	switch {
	case err == nil && now.Add(certLife/10).Before(id.leaf().NotAfter):
		return id, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("host channel identity: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("host channel identity: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: host, Organization: []string{"vmeta host"}},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(certLife), DNSNames: []string{host},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return nil, fmt.Errorf("host channel key: %w", err)
	}
	if err := atomicfile.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, fmt.Errorf("host channel certificate: %w", err)
	}
	return readIdentity(host, keyPath, certPath)
}

func readIdentity(host, keyPath, certPath string) (*Identity, error) {
	c, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		if _, serr := os.Stat(keyPath); errors.Is(serr, fs.ErrNotExist) {
			return nil, serr
		}
		return nil, err
	}
	if len(c.Certificate) != 1 {
		return nil, fmt.Errorf("%s: want one certificate, found %d", certPath, len(c.Certificate))
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil, err
	}
	c.Leaf = leaf
	return &Identity{Host: host, Cert: c, DER: c.Certificate[0]}, nil
}

func (id *Identity) leaf() *x509.Certificate { return id.Cert.Leaf }

// PEM is the identity's certificate, PEM-encoded.
func (id *Identity) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: id.DER})
}

// ChannelStore is what the channel needs of the store.
type ChannelStore interface {
	hosts.Records
}

// Publish writes this host's channel record: its certificate and address.
func Publish(ctx context.Context, st ChannelStore, id *Identity, address string, now time.Time) error {
	val, err := json.Marshal(ChannelRecord{Host: id.Host, Address: address, Cert: id.PEM(), Updated: now.UTC()})
	if err != nil {
		return err
	}
	if _, err := store.Update(ctx, st, channelPrefix+id.Host, func(store.Record, bool) ([]byte, error) { return val, nil }); err != nil {
		return fmt.Errorf("publish the host channel of %s: %w", id.Host, err)
	}
	return nil
}

// channelOf reads host's channel record (ErrInvalid: the store knows no
// such host; ErrUnavailable: it serves no channel).
func channelOf(ctx context.Context, st ChannelStore, host string) (ChannelRecord, error) {
	r, err := st.Record(ctx, channelPrefix+host)
	if errors.Is(err, store.ErrNotFound) {
		if _, herr := st.Record(ctx, hosts.Key(host)); errors.Is(herr, store.ErrNotFound) {
			return ChannelRecord{}, fmt.Errorf("%w: host %q: no such host in the store", ErrInvalid, host)
		}
		return ChannelRecord{}, fmt.Errorf("%w: host %s serves no host channel (hostctl serve --migration-listen)", ErrUnavailable, host)
	}
	if err != nil {
		return ChannelRecord{}, err
	}
	var cr ChannelRecord
	if err := json.Unmarshal(r.Value, &cr); err != nil {
		return ChannelRecord{}, fmt.Errorf("host channel record of %s: %w", host, err)
	}
	return cr, nil
}

// pinned checks that der is the certificate cr publishes, in its
// validity period.
func pinned(cr ChannelRecord, der []byte, now time.Time) error {
	b, _ := pem.Decode(cr.Cert)
	if b == nil || !bytes.Equal(b.Bytes, der) {
		return fmt.Errorf("%w: the certificate presented is not the one the store publishes for host %s", ErrForbidden, cr.Host)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("%w: certificate of host %s: %w", ErrForbidden, cr.Host, err)
	}
	if now.Before(c.NotBefore) || now.After(c.NotAfter) {
		return fmt.Errorf("%w: the certificate of host %s is not valid now (valid %s to %s)", ErrForbidden, cr.Host,
			c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// live returns nil when host's heartbeat is fresh.
func live(ctx context.Context, st ChannelStore, host string, now time.Time, downAfter time.Duration) error {
	s, err := hosts.Get(ctx, st, host, now, downAfter)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: host %q: no such host in the store", ErrInvalid, host)
	}
	if err != nil {
		return err
	}
	if s.Down {
		return fmt.Errorf("%w: host %s is down: its heartbeat is stale (last seen %s ago)", ErrUnavailable, host, s.Age.Round(time.Second))
	}
	return nil
}

// Channel is this host's end of the host-to-host channel: its client
// (Destination, for the moves it drives) and its server (Handler, for
// the moves to it).
type Channel struct {
	Store ChannelStore
	ID    *Identity
	// DownAfter judges heartbeats (hosts.DefaultDownAfter when 0).
	DownAfter time.Duration
	Log       *slog.Logger
	Now       func() time.Time
	// Local is this host as a destination (core.go).
	Local Destination
	// Moves reads the move records.
	Moves Records
}

func (c *Channel) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Channel) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// Destination implements Hosts: host over the channel, once the store
// says it is a live host that serves one.
func (c *Channel) Destination(ctx context.Context, host string) (Destination, error) {
	if err := live(ctx, c.Store, host, c.now(), c.DownAfter); err != nil {
		return nil, err
	}
	cr, err := channelOf(ctx, c.Store, host)
	if err != nil {
		return nil, err
	}
	if cr.Address == "" {
		return nil, fmt.Errorf("%w: host %s serves no host channel (hostctl serve --migration-listen)", ErrUnavailable, host)
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{c.ID.Cert},
		InsecureSkipVerify: true, // the store pins the certificate: VerifyPeerCertificate
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) != 1 {
				return fmt.Errorf("%w: host %s presented %d certificates", ErrForbidden, host, len(raw))
			}
			return pinned(cr, raw[0], c.now())
		},
	}
	return &client{host: host, base: "https://" + cr.Address, hc: &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}}, nil
}

// ServerTLS is the TLS configuration of this host's channel server: a
// client must present a certificate the store publishes, of a live host.
func (c *Channel) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.ID.Cert},
		ClientAuth:   tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := c.peerHost(context.Background(), cs)
			return err
		},
	}
}

// peerHost is the host whose published certificate the client presented
// (a live one).
func (c *Channel) peerHost(ctx context.Context, cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) != 1 {
		return "", fmt.Errorf("%w: a host presents exactly one certificate", ErrForbidden)
	}
	leaf := cs.PeerCertificates[0]
	host := leaf.Subject.CommonName
	cr, err := channelOf(ctx, c.Store, host)
	if err != nil {
		return "", fmt.Errorf("%w: client certificate names host %q: %w", ErrForbidden, host, err)
	}
	if err := pinned(cr, leaf.Raw, c.now()); err != nil {
		return "", err
	}
	if err := live(ctx, c.Store, host, c.now(), c.DownAfter); err != nil {
		return "", fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	return host, nil
}

// Serve serves the channel on l until ctx is done.
func (c *Channel) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: c.Handler(), TLSConfig: c.ServerTLS(), ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(c.log().Handler(), slog.LevelWarn)}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.ServeTLS(l, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Handler is the channel's HTTP handler (behind ServerTLS).
func (c *Channel) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/moves/{uuid}/preflight", c.serve(func(ctx context.Context, rec Record, r *http.Request) (any, error) {
		return c.Local.Preflight(ctx, rec)
	}, Migrating))
	mux.HandleFunc("PUT /v1/moves/{uuid}/files", c.serve(func(ctx context.Context, rec Record, r *http.Request) (any, error) {
		q := r.URL.Query()
		size, err := strconv.ParseInt(q.Get("size"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: size %q: not a number", ErrInvalid, q.Get("size"))
		}
		f := DiskFile{Name: q.Get("name"), Size: size, SHA256: q.Get("sha256")}
		return nil, c.Local.ReceiveDisk(ctx, rec, f, r.Body)
	}, Migrating))
	mux.HandleFunc("PUT /v1/moves/{uuid}/secrets/{id}", c.serve(func(ctx context.Context, rec Record, r *http.Request) (any, error) {
		pass, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil {
			return nil, err
		}
		defer clear(pass)
		return nil, c.Local.ReceiveSecret(ctx, rec, r.PathValue("id"), pass)
	}, Migrating))
	mux.HandleFunc("POST /v1/moves/{uuid}/takeover", c.serve(func(ctx context.Context, rec Record, _ *http.Request) (any, error) {
		return nil, c.Local.TakeOver(ctx, rec)
	}, Migrating))
	mux.HandleFunc("POST /v1/moves/{uuid}/start", c.serve(func(ctx context.Context, rec Record, _ *http.Request) (any, error) {
		return nil, c.Local.Start(ctx, rec)
	}, Migrating))
	mux.HandleFunc("POST /v1/moves/{uuid}/cleanup", c.serve(func(ctx context.Context, rec Record, _ *http.Request) (any, error) {
		return nil, c.Local.Cleanup(ctx, rec)
	}, Reverting))
	c.liveRoutes(mux) // live_channel.go
	return mux
}

// serve authorises a channel request against the store's move record
// (the source host asks, for a move to this host, in state) and answers
// with fn's result as JSON, or its error with its kind.
func (c *Channel) serve(fn func(ctx context.Context, rec Record, r *http.Request) (any, error), state string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		res, err := func() (any, error) {
			if r.TLS == nil {
				return nil, fmt.Errorf("%w: not over TLS", ErrForbidden)
			}
			peer, err := c.peerHost(ctx, *r.TLS)
			if err != nil {
				return nil, err
			}
			rec, err := Load(ctx, c.Moves, r.PathValue("uuid"))
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrForbidden, err)
			}
			switch {
			case rec.Source != peer || rec.Dest != c.ID.Host:
				return nil, fmt.Errorf("%w: the store says %s moves from %s to %s, not from %s to %s", ErrForbidden, rec.Instance, rec.Source, rec.Dest, peer, c.ID.Host)
			case rec.State != state:
				return nil, fmt.Errorf("%w: the move of %s is %s, not %s", ErrState, rec.Instance, rec.State, state)
			}
			return fn(ctx, rec, r)
		}()
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			k := errkind.Of(err)
			if k == 0 {
				k = errkind.Unavailable
			}
			c.log().Warn("host channel request refused", "path", r.URL.Path, "err", err)
			w.WriteHeader(status(k))
			_ = json.NewEncoder(w).Encode(wireError{Kind: k.String(), Error: err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(res)
	}
}

type wireError struct {
	Kind  string `json:"kind"`
	Error string `json:"error"`
}

func status(k errkind.Kind) int {
	switch k {
	case errkind.Invalid:
		return http.StatusBadRequest
	case errkind.Unauthenticated:
		return http.StatusUnauthorized
	case errkind.Forbidden:
		return http.StatusForbidden
	case errkind.NotFound:
		return http.StatusNotFound
	case errkind.Conflict:
		return http.StatusConflict
	case errkind.TooLarge:
		return http.StatusRequestEntityTooLarge
	case errkind.Unsupported:
		return http.StatusNotImplemented
	}
	return http.StatusServiceUnavailable
}

// client is a destination over the channel.
type client struct {
	host string
	base string
	hc   *http.Client
}

func (cl *client) do(ctx context.Context, method, path string, body io.Reader, size int64, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, cl.base+path, body)
	if err != nil {
		return err
	}
	if size >= 0 {
		req.ContentLength = size
	}
	resp, err := cl.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: host %s: %w", ErrUnavailable, cl.host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var we wireError
		if derr := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&we); derr != nil {
			return fmt.Errorf("%w: host %s answered %s", ErrUnavailable, cl.host, resp.Status)
		}
		return errkind.Errorf(kindNamed(we.Kind), "host %s: %s", cl.host, we.Error)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func kindNamed(s string) errkind.Kind {
	for _, k := range errkind.All() {
		if k.String() == s {
			return k
		}
	}
	return errkind.Unavailable
}

func movePath(rec Record, what string) string {
	return "/v1/moves/" + url.PathEscape(rec.UUID) + "/" + what
}

func (cl *client) Preflight(ctx context.Context, rec Record) ([]string, error) {
	var need []string
	err := cl.do(ctx, http.MethodPost, movePath(rec, "preflight"), nil, 0, &need)
	return need, err
}

func (cl *client) ReceiveDisk(ctx context.Context, rec Record, f DiskFile, body io.Reader) error {
	q := url.Values{"name": {f.Name}, "size": {strconv.FormatInt(f.Size, 10)}, "sha256": {f.SHA256}}
	return cl.do(ctx, http.MethodPut, movePath(rec, "files")+"?"+q.Encode(), body, f.Size, nil)
}

func (cl *client) ReceiveSecret(ctx context.Context, rec Record, id string, pass []byte) error {
	return cl.do(ctx, http.MethodPut, movePath(rec, "secrets/"+url.PathEscape(id)), bytes.NewReader(pass), int64(len(pass)), nil)
}

func (cl *client) TakeOver(ctx context.Context, rec Record) error {
	return cl.do(ctx, http.MethodPost, movePath(rec, "takeover"), nil, 0, nil)
}

func (cl *client) Start(ctx context.Context, rec Record) error {
	return cl.do(ctx, http.MethodPost, movePath(rec, "start"), nil, 0, nil)
}

func (cl *client) Cleanup(ctx context.Context, rec Record) error {
	return cl.do(ctx, http.MethodPost, movePath(rec, "cleanup"), nil, 0, nil)
}
