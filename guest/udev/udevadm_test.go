package udev

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// recorder is a Runner that records the udevadm command lines and
// answers with fail when a line contains it.
type recorder struct {
	calls []string
	fail  string
}

func (r *recorder) run(_ context.Context, _ string, args ...string) ([]byte, error) {
	line := strings.Join(args, " ")
	r.calls = append(r.calls, line)
	if r.fail != "" && strings.Contains(line, r.fail) {
		return []byte("udevadm: unrecognized option '--settle'"), errors.New("exit status 1")
	}
	return nil, nil
}

func TestTriggerWaitsOnlyForItsEvents(t *testing.T) {
	tests := []struct {
		name string
		fail string
		want []string
	}{
		{"udev 238 and later", "", []string{"trigger --action=change --settle /sys/a /sys/b"}},
		{"older udev", "--settle", []string{"trigger --action=change --settle /sys/a /sys/b", "trigger --action=change /sys/a /sys/b", "settle --timeout=5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{fail: tt.fail}
			u := &Udevadm{Path: "udevadm", Run: r.run}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := u.Trigger(ctx, []string{"/sys/a", "/sys/b"}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.calls, tt.want) {
				t.Errorf("udevadm calls %q, want %q", r.calls, tt.want)
			}
		})
	}
	r := &recorder{}
	if err := (&Udevadm{Path: "udevadm", Run: r.run}).Trigger(context.Background(), nil); err != nil || len(r.calls) != 0 {
		t.Errorf("no paths: err %v, calls %q; want nothing run", err, r.calls)
	}
}
