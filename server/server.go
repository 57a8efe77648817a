// Package server is vmeta's guest-facing metadata service: it identifies the
// calling guest, and serves that guest's published tree with Nova's paths,
// listings, content types and status codes, so cloud-init's OpenStack and
// EC2 readers work unchanged.
//
// The host renders each tree once (internal/metadata); the server only
// looks bytes up. Each instance's tree is turned into a table of every
// servable path on first use and kept until the instance is republished.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/store"
)

// Documents is what the server needs from a store.
type Documents interface {
	// LookupAddress returns the UUID of the instance owning a source
	// address, or store.ErrNotFound.
	LookupAddress(ctx context.Context, addr string) (string, error)
	// Document returns an instance's published document.
	Document(ctx context.Context, uuid string) (store.Document, error)
}

// Options configure a Server.
type Options struct {
	Logger *slog.Logger
	// Now returns the current time (the /openstack listing hides versions
	// dated after today, UTC). time.Now when nil.
	Now func() time.Time
}

// Server serves metadata over HTTP. It is an http.Handler.
type Server struct {
	docs Documents
	log  *slog.Logger
	now  func() time.Time

	mu     sync.RWMutex
	gen    uint64           // bumped by Invalidate; guards against stale fills
	byAddr map[string]*view // source address -> view
}

// New returns a Server reading documents from docs.
func New(docs Documents, opts Options) *Server {
	s := &Server{docs: docs, log: opts.Logger, now: opts.Now, byAddr: map[string]*view{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Invalidate drops cached views after an instance was published or deleted
// (its addresses may have changed, so the whole address cache goes; a
// publish is rare next to reads).
func (s *Server) Invalidate(uuid string) {
	s.mu.Lock()
	s.gen++
	clear(s.byAddr)
	s.mu.Unlock()
}

var ec2VersionListing = []byte(strings.Join(append(append([]string(nil), metadata.EC2Versions...), "latest"), "\n"))

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "405 Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	key := NormalizePath(r.URL.Path)
	if key == "ec2" {
		// GET / lists the EC2 versions without looking up the caller.
		write(w, r, entry{body: ec2VersionListing, contentType: contentText})
		return
	}
	v, err := s.viewFor(r)
	switch {
	case errors.Is(err, store.ErrNotFound):
		http.Error(w, "404 Not Found: no metadata for this address", http.StatusNotFound)
		return
	case err != nil:
		s.log.Error("metadata lookup failed", "remote", r.RemoteAddr, "err", err)
		http.Error(w, "500 Internal Server Error", http.StatusInternalServerError)
		return
	}
	if key == "openstack" {
		write(w, r, textEntry(s.openstackListing()))
		return
	}
	e, ok := v.paths[key]
	if !ok {
		http.NotFound(w, r)
		return
	}
	write(w, r, e)
}

func write(w http.ResponseWriter, r *http.Request, e entry) {
	h := w.Header()
	h.Set("Content-Type", e.contentType)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(e.body)
}

// openstackListing lists the OpenStack versions dated today or earlier,
// then "latest" (future versions stay requestable, only hidden).
func (s *Server) openstackListing() string {
	today := s.now().UTC().Format("2006-01-02")
	var b strings.Builder
	for _, v := range metadata.OpenStackVersions {
		if v <= today {
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	b.WriteString("latest")
	return b.String()
}

// NormalizePath applies Nova's path rules: posixpath.normpath (trailing
// slashes, "//", "." and ".." do not matter) and the EC2 prefix rule (a
// first segment other than "ec2" or "openstack" gets "ec2/" in front). It
// returns the path without its leading slash; "/" becomes "ec2".
func NormalizePath(p string) string {
	p = path.Clean("/" + p)
	rest := p[1:]
	first, _, _ := strings.Cut(rest, "/")
	switch {
	case rest == "":
		return "ec2"
	case first == "ec2" || first == "openstack":
		return rest
	default:
		return "ec2/" + rest
	}
}

// viewFor identifies the caller by its source address and returns its view.
func (s *Server) viewFor(r *http.Request) (*view, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil, store.ErrNotFound
	}
	addr := ip.Unmap().WithZone("").String()

	s.mu.RLock()
	v, gen := s.byAddr[addr], s.gen
	s.mu.RUnlock()
	if v != nil {
		return v, nil
	}

	ctx := r.Context()
	uuid, err := s.docs.LookupAddress(ctx, addr)
	if err != nil {
		return nil, err
	}
	doc, err := s.docs.Document(ctx, uuid)
	if err != nil {
		return nil, err
	}
	t, err := metadata.DecodeTree(doc.Tree)
	if err != nil {
		return nil, err
	}
	v, err = buildView(t, uuid, doc.Version)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.gen == gen {
		s.byAddr[addr] = v
	}
	s.mu.Unlock()
	return v, nil
}
