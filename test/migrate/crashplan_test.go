package migrate_test

import "testing"

// TestCrashPlan: the SIGKILL matrix's rows split over its pairs of hosts
// each row once, every pair's shut-off rows before its running ones (a
// pair's instance is started once and never stopped between rows), the
// running rows spread over the pairs, and each request kind keeps a
// running-guest row.
func TestCrashPlan(t *testing.T) {
	cases := crashCases()
	for point := range crashRunning {
		found := false
		for _, c := range cases {
			found = found || c.point == point
		}
		if !found {
			t.Errorf("crashRunning names %q, no step of the matrix", point)
		}
	}
	for n := 1; n <= 4; n++ {
		seen := map[int]int{}
		kinds := map[string]bool{}
		most := 0
		for g, rows := range crashPlan(cases, n) {
			run := 0
			for k, i := range rows {
				seen[i]++
				if crashRunning[cases[i].point] {
					run++
					kinds[cases[i].request] = true
				} else if k > 0 && crashRunning[cases[rows[k-1]].point] {
					t.Errorf("%d pairs: pair %d has the shut-off row %v after a running one: %v", n, g, cases[i], rows)
				}
			}
			most = max(most, run)
		}
		for i := range cases {
			if seen[i] != 1 {
				t.Errorf("%d pairs: row %v planned %d times", n, cases[i], seen[i])
			}
		}
		if len(seen) != len(cases) {
			t.Errorf("%d pairs: %d rows planned, want %d", n, len(seen), len(cases))
		}
		if want := (len(crashRunning) + n - 1) / n; most > want {
			t.Errorf("%d pairs: a pair has %d running rows, want at most %d", n, most, want)
		}
		for _, k := range []string{"migrate", "confirm", "revert"} {
			if !kinds[k] {
				t.Errorf("no running-guest row for %s", k)
			}
		}
	}
}
