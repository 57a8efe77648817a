package daemon

import (
	"log/slog"
	"reflect"
	"testing"

	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestHostsEventsMetricsServedOutsideTheCore (issue 22, items 1 and 7):
// the hosts sharing the store are served by hostctl/hosts, the audit
// streams by hostctl/events, the heartbeat's count and the metrics'
// instance states by their own packages; the controller no longer
// forwards any of them.
func TestHostsEventsMetricsServedOutsideTheCore(t *testing.T) {
	ctl := reflect.TypeFor[*controller.Controller]()
	for _, m := range []string{"Hosts", "Count", "ReadEvents", "Audit", "InstanceStates"} {
		if _, ok := ctl.MethodByName(m); ok {
			t.Errorf("the controller has %s: that belongs outside the core", m)
		}
	}

	dir := t.TempDir()
	st := stores.BoltIn(t, dir)
	c := controller.New(st, controller.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	reg := hosts.Registry{Store: st}
	audit := events.New(events.NewFiles(t.TempDir()), "host-a", nil)
	s := adminServices(c, catalog.New(catalog.Options{}), nil, nil, keyService{}, reg, audit)
	if got, ok := s.Hosts.(hosts.Registry); !ok || got.Store != reg.Store {
		t.Errorf("hosts served by %T, want hostctl/hosts's registry", s.Hosts)
	}
	if s.Events != any(audit) {
		t.Errorf("audit events served by %T, want hostctl/events's log", s.Events)
	}
}
