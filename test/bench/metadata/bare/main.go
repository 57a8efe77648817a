// Command bare is the ceiling of the metadata benchmark
// (test/bench/metadata): a plain net/http server that answers a few fixed
// paths with constant bodies, so that the benchmark can tell what this
// machine, this Go and this load generator allow before any metadata
// logic runs. It is run as its own process, like every other target.
//
//	bare -listen 127.0.0.1:PORT -config routes.json [-metrics-listen 127.0.0.1:PORT2]
//
// routes.json is [{"path": "/a/b", "content_type": "text/plain", "body": "…"}];
// each path is served for GET (and HEAD) with a standard ServeMux pattern.
// With -metrics-listen, GET /metrics on that second listener answers
// go_memstats_mallocs_total and go_memstats_alloc_bytes_total (as a
// Prometheus Go collector names the heap allocations and bytes so far), so
// that the boot storm can compare allocations per request with hostctl's.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime/metrics"
	"time"
)

// Route is one constant answer.
type Route struct {
	Path        string `json:"path"`
	ContentType string `json:"content_type"`
	Body        string `json:"body"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	config := flag.String("config", "", "JSON file listing the routes")
	metricsListen := flag.String("metrics-listen", "", "address to serve GET /metrics (allocations) on; empty: none")
	flag.Parse()
	if *metricsListen != "" {
		go func() {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /metrics", serveMallocs)
			srv := &http.Server{Addr: *metricsListen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintln(os.Stderr, "bare: metrics:", srv.ListenAndServe())
			os.Exit(1)
		}()
	}
	if err := run(*listen, *config); err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
}

func run(listen, config string) error {
	raw, err := os.ReadFile(config)
	if err != nil {
		return fmt.Errorf("read routes: %w", err)
	}
	var routes []Route
	if err := json.Unmarshal(raw, &routes); err != nil {
		return fmt.Errorf("parse routes %s: %w", config, err)
	}
	mux := http.NewServeMux()
	for _, r := range routes {
		body, ctype := []byte(r.Body), r.ContentType
		mux.HandleFunc("GET "+r.Path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", ctype)
			_, _ = w.Write(body)
		})
	}
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// serveMallocs answers the heap allocations and bytes so far, counted as
// the Prometheus Go collector counts go_memstats_mallocs_total and
// go_memstats_alloc_bytes_total.
func serveMallocs(w http.ResponseWriter, _ *http.Request) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/tiny/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	fmt.Fprintf(w, "go_memstats_mallocs_total %d\n", s[0].Value.Uint64()+s[1].Value.Uint64())
	fmt.Fprintf(w, "go_memstats_alloc_bytes_total %d\n", s[2].Value.Uint64())
}
