package source

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The agent's own HTTP/1.1 client: what asking a link-local metadata
// service needs (GET and PUT without a body, a few request headers, the
// status, headers and a bounded body of the answer; Content-Length,
// chunked or until the connection closes), one connection per request,
// no proxy, no redirects, no TLS. It is not net/http's client because
// that one links TLS, HTTP/2 and X.509 too: 3.7 MB of the agent's 7.7,
// paged in at every boot the agent holds.

// Timeouts of one request: connecting, and the whole exchange.
const (
	dialTimeout    = 3 * time.Second
	requestTimeout = 10 * time.Second
	// maxHeaderBytes bounds the status line and headers of an answer.
	maxHeaderBytes = 64 << 10
)

// response is an answer: its status code and reason phrase, its headers
// and its body (at most the limit asked for plus one byte, so that the
// caller sees a body that is too long).
type response struct {
	code   int
	status string // "404 Not Found"
	header textproto.MIMEHeader
	body   []byte
}

// errHTTP is wrapped by errors of answers that are not HTTP/1.x.
var errHTTP = errors.New("malformed HTTP answer")

// do sends method (GET or PUT, no body) to rawURL with the headers
// hdr (name, value pairs) and reads the answer, at most limit+1 bytes of
// its body.
func do(ctx context.Context, method, rawURL string, hdr []string, limit int64) (*response, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if u.Scheme != "http" || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%w: %s: want http://host[:port]/path", ErrInvalid, rawURL)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	conn, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, "tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return nil, err
		}
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // cancellation ends a blocked read
	defer stop()

	// The Host header carries no IPv6 zone (RFC 9110 7.2, as net/http).
	hostHdr := u.Host
	if i := strings.IndexByte(hostHdr, '%'); i >= 0 {
		if j := strings.LastIndexByte(hostHdr, ']'); j > i {
			hostHdr = hostHdr[:i] + hostHdr[j:]
		}
	}
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: vmeta-agent\r\nConnection: close\r\n", method, u.RequestURI(), hostHdr)
	if method != "GET" {
		req.WriteString("Content-Length: 0\r\n")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.ContainsAny(hdr[i]+hdr[i+1], "\r\n") {
			return nil, fmt.Errorf("%w: header %s: line break in its value", ErrInvalid, hdr[i])
		}
		fmt.Fprintf(&req, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return nil, ctxErr(ctx, err)
	}
	resp, err := readResponse(bufio.NewReader(conn), method, limit)
	return resp, ctxErr(ctx, err)
}

// ctxErr prefers the context's error to the one a closed connection gave.
func ctxErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		// Told, not wrapped: the context's error is the answer.
		return fmt.Errorf("%w (%s)", ctx.Err(), err.Error())
	}
	return err
}

// readResponse reads an answer from br (the connection closes after it).
func readResponse(br *bufio.Reader, method string, limit int64) (*response, error) {
	head := &io.LimitedReader{R: br, N: maxHeaderBytes}
	tp := textproto.NewReader(bufio.NewReader(head))
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return nil, fmt.Errorf("%w: status line: %w", errHTTP, err)
		}
		proto, status, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(proto, "HTTP/1.") || len(status) < 3 {
			return nil, fmt.Errorf("%w: status line %q", errHTTP, line)
		}
		code, err := strconv.Atoi(status[:3])
		if err != nil || code < 100 || code > 999 || len(status) > 3 && status[3] != ' ' {
			return nil, fmt.Errorf("%w: status line %q", errHTTP, line)
		}
		h, err := tp.ReadMIMEHeader()
		if err != nil {
			return nil, fmt.Errorf("%w: headers: %w", errHTTP, err)
		}
		if code >= 100 && code < 200 {
			continue // 100 Continue and the like: the answer follows
		}
		resp := &response{code: code, status: status, header: h}
		// What the header reader buffered beyond the headers is body.
		body := io.MultiReader(tp.R, br)
		if method == "HEAD" || code == 204 || code == 304 {
			return resp, nil
		}
		var r io.Reader
		switch te := strings.ToLower(h.Get("Transfer-Encoding")); {
		case te == "chunked":
			r = &chunked{r: bufio.NewReader(body)}
		case te != "" && te != "identity":
			return nil, fmt.Errorf("%w: Transfer-Encoding %q", errHTTP, te)
		case h.Get("Content-Length") != "":
			n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%w: Content-Length %q", errHTTP, h.Get("Content-Length"))
			}
			r = &exactly{r: io.LimitReader(body, n), left: n}
		default:
			r = body // until the connection closes
		}
		resp.body, err = io.ReadAll(io.LimitReader(r, limit+1))
		if err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
		return resp, nil
	}
}

// exactly reads a Content-Length body: ending early is an error.
type exactly struct {
	r    io.Reader
	left int64
}

func (e *exactly) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// chunked decodes a chunked body (RFC 9112 7.1); trailers are skipped.
type chunked struct {
	r    *bufio.Reader
	left int64 // of the current chunk
	done bool
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.done {
		return 0, io.EOF
	}
	if c.left == 0 {
		line, err := c.line()
		if err != nil {
			return 0, err
		}
		size, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: chunk size %q", errHTTP, line)
		}
		if n == 0 {
			for { // trailers, up to the empty line
				l, err := c.line()
				if err != nil {
					return 0, err
				}
				if l == "" {
					break
				}
			}
			c.done = true
			return 0, io.EOF
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && c.left == 0 {
		if l, lerr := c.line(); lerr != nil || l != "" {
			return n, fmt.Errorf("%w: no line end after a chunk", errHTTP)
		}
	}
	return n, err
}

// line reads one CRLF- (or LF-) terminated line of at most 4 KiB.
func (c *chunked) line() (string, error) {
	var b []byte
	for {
		frag, err := c.r.ReadSlice('\n')
		b = append(b, frag...)
		if len(b) > 4096 {
			return "", fmt.Errorf("%w: chunk line too long", errHTTP)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
