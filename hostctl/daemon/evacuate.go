package daemon

import (
	"context"
	"time"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/migrate"
	"github.com/vmeta/vmeta/internal/store"
)

// Evacuations (hostctl/migrate, evacuate.go): this host rebuilds the
// instances of down hosts on request (the admin API's evacuate route),
// and removes what it still holds of its own instances evacuated while
// it was down: at start-up, before the reconciler looks at its domains,
// and then every heartbeat interval.

// evacuation is what the daemon runs of the evacuations.
type evacuation struct {
	e    *migrate.Evacuator
	stop func()
}

func (s *serve) startEvacuations(ctx context.Context) error {
	recs, ok := s.ctlStore.(store.Records)
	if !ok || s.ctl == nil || s.hostName == "" {
		return nil
	}
	host := &migrate.EvacHost{Name: s.hostName, Core: s.ctl, Disks: s.disks, Log: s.log}
	e := &migrate.Evacuator{Store: recs, Host: s.hostName, Dest: host, Source: host, Log: s.log,
		Emit: func(ctx context.Context, typ string, p map[string]string) {
			s.ctl.Emit(ctx, controller.StreamInstances, typ, p)
		}}
	if err := e.Sweep(ctx); err != nil {
		// Logged per evacuation; the periodic sweep retries.
		s.log.Warn("evacuated instances' copies on this host not all removed yet", "err", err)
	}
	interval := s.cfg.HeartbeatInterval
	if interval <= 0 {
		interval = time.Minute
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.RunSweeps(runCtx, interval)
	}()
	s.evac = &evacuation{e: e, stop: func() { cancel(); <-done }}
	return nil
}

func (s *serve) stopEvacuations(context.Context) error {
	if s.evac != nil {
		s.evac.stop()
	}
	return nil
}

// evacuations is the admin API's evacuation service (nil without).
func (s *serve) evacuations() api.EvacuationService {
	if s.evac == nil {
		return nil
	}
	return evacuationService{e: s.evac.e, observe: func(d time.Duration, err error) { s.hm.Observe("evacuate", d, err) }}
}

// evacuationService answers the admin API's evacuate route; the
// operation's duration and outcome go to the metrics ("evacuate").
type evacuationService struct {
	e       *migrate.Evacuator
	observe func(time.Duration, error)
}

func (es evacuationService) Evacuate(ctx context.Context, name, host string) (types.Evacuation, error) {
	start := time.Now()
	rec, err := es.e.Evacuate(ctx, name, host)
	es.observe(time.Since(start), err)
	return types.Evacuation{Instance: rec.Instance, UUID: rec.UUID, Source: rec.Source, Dest: rec.Dest, State: rec.State, Step: rec.Step,
		Error: rec.Error, OldSecrets: len(rec.OldSecrets), Started: rec.Started, Updated: rec.Updated}, err
}
