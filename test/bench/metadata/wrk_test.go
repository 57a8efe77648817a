package main

import (
	"testing"
	"time"
)

// A report of wrk 4.1.0 --latency with errors, as Debian's wrk prints it.
const wrkReport = `Running 3s test @ http://127.0.0.1:50999/2009-04-04/meta-data/hostname
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.52ms    3.62ms  35.83ms   86.39%
    Req/Sec    28.84k     4.94k   52.60k    77.05%
  Latency Distribution
     50%  806.00us
     75%    3.74ms
     90%    7.34ms
     99%   1.02s
  174986 requests in 3.10s, 20.19MB read
  Socket errors: connect 0, read 3, write 0, timeout 2
  Non-2xx or 3xx responses: 12
Requests/sec:  56444.53
Transfer/sec:      6.51MB
`

func TestParseWrk(t *testing.T) {
	r, err := parseWrk(wrkReport)
	if err != nil {
		t.Fatal(err)
	}
	want := result{rps: 56444.53, p50: 806 * time.Microsecond, p90: 7340 * time.Microsecond, p99: 1020 * time.Millisecond,
		requests: 174986, non2xx: 12, sockErrors: 5, sockDetail: "read 3, timeout 2"}
	if *r != want {
		t.Errorf("parseWrk =\n%+v, want\n%+v", *r, want)
	}
	if r.errors() != 17 {
		t.Errorf("errors() = %d, want 17", r.errors())
	}
}

func TestParseWrkIncomplete(t *testing.T) {
	if _, err := parseWrk("unable to connect to 127.0.0.1:1 Connection refused\n"); err == nil {
		t.Error("parseWrk accepted a report without figures")
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999.4: "999", 1000: "1,000", 56444.53: "56,445", 1234567: "1,234,567"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}
