package controller

import (
	"log/slog"
	"time"

	"github.com/vmeta/vmeta/hostctl/virt"
)

// steps times the steps of one apply or publish for a debug log line
// (issue 23 item 4: where an apply's time goes), e.g.
//
//	msg="apply steps" name=web-1 check=1.2ms disks=61ms define=20ms … libvirt_calls=9
//
// libvirt_calls is the number of RPCs this process sent to libvirtd
// meanwhile (virt.RPCs: every caller's, so exact only when nothing else
// runs).
type steps struct {
	last  time.Time
	rpcs  int64
	attrs []any
}

func newSteps(name string) *steps {
	return &steps{last: time.Now(), rpcs: virt.RPCs(), attrs: []any{"name", name}}
}

// done ends the step called step, which began when the previous one ended.
func (s *steps) done(step string) {
	now := time.Now()
	s.attrs = append(s.attrs, step, now.Sub(s.last).Round(10*time.Microsecond))
	s.last = now
}

// log writes the line at debug level.
func (s *steps) log(l *slog.Logger, msg string) {
	l.Debug(msg, append(s.attrs, "libvirt_calls", virt.RPCs()-s.rpcs)...)
}
