package source

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The metadata service's well-known addresses.
const (
	MetadataIPv4 = "169.254.169.254"
	MetadataIPv6 = "fe80::a9fe:a9fe"
)

// Session token headers (IMDSv2 style, as vmeta's server and EC2 use).
const (
	tokenPath      = "latest/api/token"
	hdrToken       = "X-aws-ec2-metadata-token"
	hdrTokenTTL    = "X-aws-ec2-metadata-token-ttl-seconds"
	defaultTTL     = 21600 // the most the service grants: 6 hours
	tokenRenewSkew = 60 * time.Second
)

// HTTP reads the document from the metadata service.
type HTTP struct {
	// URLs are the service's base URLs, tried in order; DefaultURLs()
	// when empty.
	URLs []string
	// Attempts is how many rounds over URLs one Fetch makes (3 when 0);
	// Backoff is the first pause between rounds (1s when 0), doubled
	// each round.
	Attempts int
	Backoff  time.Duration

	mu       sync.Mutex
	token    string
	tokenFor string
	tokenExp time.Time
}

func (h *HTTP) String() string {
	return "metadata service " + strings.Join(h.urls(), ", ")
}

// DefaultURLs returns http://169.254.169.254 and, for every interface that
// is up, not loopback and has an IPv6 link-local address,
// http://[fe80::a9fe:a9fe%<interface>] (a link-local address needs its
// zone).
func DefaultURLs() []string {
	out := []string{"http://" + MetadataIPv4}
	ifs, err := net.Interfaces()
	if err != nil {
		return out
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() == nil && ipn.IP.IsLinkLocalUnicast() {
				out = append(out, "http://["+MetadataIPv6+"%25"+url.PathEscape(ifc.Name)+"]")
				break
			}
		}
	}
	return out
}

func (h *HTTP) urls() []string {
	if len(h.URLs) > 0 {
		return h.URLs
	}
	return DefaultURLs()
}

// statusError is an HTTP answer other than 200.
type statusError struct {
	code   int
	status string // "404 Not Found"
	url    string
	// retryAfter is the service's Retry-After, if any.
	retryAfter time.Duration
}

func (e *statusError) Error() string {
	return fmt.Sprintf("GET %s: %s", e.url, e.status)
}

// retryable reports whether another attempt may succeed.
func retryable(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		return se.code >= 500 || se.code == 429 || se.code == 401 // Too Many Requests, Unauthorized
	}
	return !errors.Is(err, ErrInvalid)
}

// Fetch reads openstack/latest/meta_data.json. Connection failures, 5xx,
// 429 and 401 are retried (Attempts rounds over every URL with growing
// pauses, honouring Retry-After up to 30s); a 401 first fetches a session
// token (PUT /latest/api/token) and retries at once; a 404 and a document
// that is not valid metadata are not retried.
func (h *HTTP) Fetch(ctx context.Context) (*Document, error) {
	attempts := h.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	return h.fetch(ctx, attempts)
}

// FetchOnce is Fetch with one round over the URLs, whatever Attempts says:
// for a guest that has its metadata from another source already and only
// asks whether the service has a newer revision.
func (h *HTTP) FetchOnce(ctx context.Context) (*Document, error) { return h.fetch(ctx, 1) }

func (h *HTTP) fetch(ctx context.Context, attempts int) (*Document, error) {
	pause := h.Backoff
	if pause <= 0 {
		pause = time.Second
	}
	var errs []error
	for round := 0; round < attempts; round++ {
		if round > 0 {
			wait := pause
			var se *statusError
			if errors.As(errs[len(errs)-1], &se) && se.retryAfter > wait {
				wait = min(se.retryAfter, 30*time.Second)
			}
			select {
			case <-ctx.Done():
				return nil, errors.Join(append(errs, ctx.Err())...)
			case <-time.After(wait):
			}
			pause *= 2
		}
		for _, base := range h.urls() {
			doc, err := h.fetchOne(ctx, base)
			if err == nil {
				return doc, nil
			}
			errs = append(errs, err)
			if !retryable(err) {
				return nil, err
			}
		}
	}
	return nil, fmt.Errorf("metadata service: %d attempts failed: %w", attempts, errors.Join(last(errs, 3)...))
}

func last(errs []error, n int) []error {
	if len(errs) > n {
		return errs[len(errs)-n:]
	}
	return errs
}

func (h *HTTP) fetchOne(ctx context.Context, base string) (*Document, error) {
	u := strings.TrimRight(base, "/") + "/" + MetaDataPath
	body, err := h.get(ctx, base, u, h.cachedToken(base))
	var se *statusError
	if errors.As(err, &se) && se.code == 401 { // Unauthorized
		// The service wants a (new) session token.
		h.dropToken()
		tok, terr := h.fetchToken(ctx, base)
		if terr != nil {
			return nil, fmt.Errorf("%w (and the session token: %w)", err, terr)
		}
		body, err = h.get(ctx, base, u, tok)
	}
	if err != nil {
		return nil, err
	}
	doc, err := Parse(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	doc.Origin, doc.Source = base, KindHTTP
	return doc, nil
}

func (h *HTTP) get(ctx context.Context, base, u, token string) ([]byte, error) {
	var hdr []string
	if token != "" {
		hdr = []string{hdrToken, token}
	}
	resp, err := do(ctx, "GET", u, hdr, MaxDocument)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.code != 200 {
		se := &statusError{code: resp.code, status: resp.status, url: u}
		if s, err := strconv.Atoi(resp.header.Get("Retry-After")); err == nil && s > 0 {
			se.retryAfter = time.Duration(s) * time.Second
		}
		return nil, se
	}
	return resp.body, nil
}

func (h *HTTP) cachedToken(base string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.token != "" && h.tokenFor == base && time.Now().Before(h.tokenExp) {
		return h.token
	}
	return ""
}

func (h *HTTP) dropToken() {
	h.mu.Lock()
	h.token = ""
	h.mu.Unlock()
}

func (h *HTTP) fetchToken(ctx context.Context, base string) (string, error) {
	u := strings.TrimRight(base, "/") + "/" + tokenPath
	resp, err := do(ctx, "PUT", u, []string{hdrTokenTTL, strconv.Itoa(defaultTTL)}, 4096)
	if err != nil {
		return "", fmt.Errorf("PUT %s: %w", u, err)
	}
	if resp.code != 200 {
		return "", fmt.Errorf("PUT %s: %s", u, resp.status)
	}
	b := resp.body
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("PUT %s: no usable token in the answer", u)
	}
	ttl := defaultTTL
	if v, err := strconv.Atoi(resp.header.Get(hdrTokenTTL)); err == nil && v > 0 {
		ttl = v
	}
	exp := time.Now().Add(time.Duration(ttl)*time.Second - tokenRenewSkew)
	h.mu.Lock()
	h.token, h.tokenFor, h.tokenExp = tok, base, exp
	h.mu.Unlock()
	return tok, nil
}
