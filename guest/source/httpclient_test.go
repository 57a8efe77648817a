package source

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDo: the agent's HTTP client against net/http's server: bodies with
// Content-Length, chunked and (over a raw connection) until close; the
// headers it sends; the limit; a PUT; answers that are not HTTP.
func TestDo(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", "5")
			fmt.Fprint(w, "hello")
		case "/chunked":
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "part %d;", i)
				w.(http.Flusher).Flush()
			}
		case "/big":
			fmt.Fprint(w, big)
		case "/echo":
			w.Header().Set("X-Got", r.Method+" "+r.Host+" "+r.URL.RequestURI()+" "+r.Header.Get("X-Test")+" "+r.Header.Get("Content-Length"))
			w.WriteHeader(http.StatusTeapot)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	for _, tt := range []struct {
		path, method string
		limit        int64
		code         int
		body         string
	}{
		{"/length", "GET", 100, 200, "hello"},
		{"/chunked", "GET", 100, 200, "part 0;part 1;part 2;"},
		{"/big", "GET", 1 << 20, 200, big},
		{"/big", "GET", 1000, 200, big[:1001]}, // limit+1: the caller sees it is too long
		{"/nothing", "GET", 100, 404, "404 page not found\n"},
	} {
		r, err := do(ctx, tt.method, srv.URL+tt.path, nil, tt.limit)
		if err != nil || r.code != tt.code || string(r.body) != tt.body {
			t.Errorf("%s %s: %v, %+v", tt.method, tt.path, err, r)
		}
	}
	r, err := do(ctx, "PUT", srv.URL+"/echo?a=b", []string{"X-Test", "v 1"}, 100)
	host := strings.TrimPrefix(srv.URL, "http://")
	if err != nil || r.code != 418 || r.status != "418 I'm a teapot" || r.header.Get("X-Got") != "PUT "+host+" /echo?a=b v 1 0" {
		t.Errorf("PUT /echo: %v, %+v", err, r)
	}
	if _, err := do(ctx, "GET", srv.URL+"/echo", []string{"X-Test", "a\r\nX-Evil: 1"}, 100); !errors.Is(err, ErrInvalid) {
		t.Errorf("header with a line break: %v, want ErrInvalid", err)
	}
	for _, u := range []string{"https://" + host + "/", "ftp://x/", "http:///x", "http://u:p@" + host + "/", "http://[::1/"} {
		if _, err := do(ctx, "GET", u, nil, 100); !errors.Is(err, ErrInvalid) {
			t.Errorf("GET %s: %v, want ErrInvalid", u, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := do(cctx, "GET", srv.URL+"/length", nil, 100); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestDoRawAnswers: answers written byte for byte: a body until the
// connection closes, 100 Continue first, a body shorter than its
// Content-Length, garbage; and the Host header of an IPv6 address with a
// zone.
func TestDoRawAnswers(t *testing.T) {
	for _, tt := range []struct {
		name, answer string
		code         int
		body, err    string
	}{
		{"until close", "HTTP/1.0 200 OK\r\n\r\nall of it", 200, "all of it", ""},
		{"100 first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", ""},
		{"short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 0, "", "unexpected EOF"},
		{"chunk cut", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 0, "", "unexpected EOF"},
		{"chunk trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nab\r\n0\r\nT: 1\r\n\r\n", 200, "ab", ""},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, "", "chunk size"},
		{"gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", 0, "", "Transfer-Encoding"},
		{"not http", "SSH-2.0-OpenSSH\r\n", 0, "", "status line"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, "", "Content-Length"},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", 204, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "[::1]:0")
			if err != nil {
				ln, err = net.Listen("tcp", "127.0.0.1:0")
			}
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan string, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				var req strings.Builder
				for {
					l, err := br.ReadString('\n')
					req.WriteString(l)
					if err != nil || l == "\r\n" {
						break
					}
				}
				got <- req.String()
				fmt.Fprint(c, tt.answer)
			}()
			addr := ln.Addr().(*net.TCPAddr)
			u := fmt.Sprintf("http://%s/x", addr)
			wantHost := addr.String()
			if addr.IP.To4() == nil {
				u = fmt.Sprintf("http://[::1%%25lo]:%d/x", addr.Port) // a zone, as for fe80::a9fe:a9fe
				wantHost = fmt.Sprintf("[::1]:%d", addr.Port)
			}
			r, err := do(context.Background(), "GET", u, nil, 100)
			if req := <-got; !strings.Contains(req, "\r\nHost: "+wantHost+"\r\n") {
				t.Errorf("request:\n%s\nwant Host: %s", req, wantHost)
			}
			switch {
			case tt.err != "":
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("got %+v, %v; want an error containing %q", r, err, tt.err)
				}
			case err != nil || r.code != tt.code || string(r.body) != tt.body:
				t.Errorf("got %+v, %v; want %d %q", r, err, tt.code, tt.body)
			}
		})
	}
}

// FuzzReadResponse: any answer yields an error or a response whose body
// is within the limit; nothing panics or runs away.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nbody", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 401 Unauthorized\r\n\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := readResponse(bufio.NewReader(strings.NewReader(s)), "GET", 64)
		if err == nil && (len(r.body) > 65 || r.code < 200 || r.code > 999) {
			t.Errorf("%q: %+v", s, r)
		}
	})
}
