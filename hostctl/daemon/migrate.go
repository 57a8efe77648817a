package daemon

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/migrate"
	"github.com/vmeta/vmeta/internal/store"
)

// Moves between hosts (hostctl/migrate): this host's side of the moves,
// its host-to-host channel (mutual TLS, certificates pinned through the
// store) on --migration-listen, and the admin API's move routes.

// migration is what the daemon runs of the moves.
type migration struct {
	m    *migrate.Migrator
	stop func()
}

// startMigration makes this host's channel identity and publishes it
// (a source needs it even when it does not listen: the destination pins
// its certificate), and serves the channel on --migration-listen. Without
// a listener this host can move instances away but not receive any.
func (s *serve) startMigration(ctx context.Context) error {
	recs, ok := s.ctlStore.(store.Records)
	if !ok || s.ctl == nil {
		return nil
	}
	id, err := migrate.LoadIdentity(s.cfg.DataDir, s.hostName, time.Now())
	if err != nil {
		return err
	}
	// The bytes of disk this host sent in moves, beside the operations'
	// durations (vmeta_hostctl_operation_duration_seconds{op="migrate"}
	// and {op="migrate-disk-copy"}).
	sent := prometheus.NewCounter(prometheus.CounterOpts{Name: "vmeta_hostctl_migration_bytes_total",
		Help: "Bytes of disk files this host sent to other hosts in moves that reached verify."})
	if s.mdOpts.Registry != nil {
		if err := s.mdOpts.Registry.Register(sent); err != nil {
			return fmt.Errorf("migration metrics: %w", err)
		}
	}
	host := &migrate.Host{Name: s.hostName, Core: s.ctl, Records: s.disks, Keys: s.km, Images: luksTool(s.cfg), Log: s.log,
		StopTimeout: controller.DefaultStopTimeout}
	src, local := s.liveHost(host) // migrate_live.go
	ch := &migrate.Channel{Store: recs, ID: id, DownAfter: s.cfg.HostDownAfter, Log: s.log, Local: local, Moves: recs}
	m := &migrate.Migrator{Store: recs, Host: s.hostName, Source: src, Hosts: ch, Log: s.log,
		Emit: func(ctx context.Context, typ string, p map[string]string) {
			s.ctl.Emit(ctx, controller.StreamInstances, typ, p)
		},
		Observe: func(rec migrate.Record, err error) {
			s.hm.Observe("migrate", time.Since(rec.Started), err)
			if err == nil && rec.Copy > 0 {
				s.hm.Observe("migrate-disk-copy", rec.Copy, nil)
			}
			if err == nil {
				sent.Add(float64(rec.Bytes))
			}
		}}
	s.mig = &migration{m: m, stop: func() {}}
	addr := ""
	var l net.Listener
	if s.cfg.MigrationListen != "" {
		if l, err = net.Listen("tcp", s.cfg.MigrationListen); err != nil {
			return configErrorf("--migration-listen: %w", err)
		}
		addr = l.Addr().String()
	}
	if err := migrate.Publish(ctx, recs, id, addr, time.Now()); err != nil {
		if l != nil {
			l.Close()
		}
		return err
	}
	if l == nil {
		return nil
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ch.Serve(runCtx, l); err != nil {
			s.log.Error("host channel stopped", "err", err)
		}
	}()
	s.mig.stop = func() { cancel(); <-done }
	s.log.Info("host channel listening", "addr", addr)
	return nil
}

func (s *serve) stopMigration(context.Context) error {
	if s.mig != nil {
		s.mig.stop()
	}
	return nil
}

// migrations is the admin API's move service (nil without moves).
func (s *serve) migrations() api.MigrationService {
	if s.mig == nil {
		return nil
	}
	return migrationService{s.mig.m}
}

// migrationService answers the admin API's move routes. A move, a
// confirm and a revert run to their end (or to a step that fails) even
// when the client goes away: a disconnect does not stop them half-way.
type migrationService struct{ m *migrate.Migrator }

func (ms migrationService) Migrate(ctx context.Context, name string, req types.MigrateRequest) (types.Migration, error) {
	if req.Live {
		rec, err := ms.m.MigrateLive(context.WithoutCancel(ctx), name, req.Host)
		return wireMigration(rec), err
	}
	rec, err := ms.m.MigrateWith(context.WithoutCancel(ctx), name, req.Host, time.Duration(req.TimeoutSeconds*float64(time.Second)))
	return wireMigration(rec), err
}

func (ms migrationService) ConfirmMigration(ctx context.Context, name string) (types.Migration, error) {
	rec, err := ms.m.Confirm(context.WithoutCancel(ctx), name)
	return wireMigration(rec), err
}

func (ms migrationService) RevertMigration(ctx context.Context, name string) (types.Migration, error) {
	rec, err := ms.m.Revert(context.WithoutCancel(ctx), name)
	return wireMigration(rec), err
}

func (ms migrationService) Migration(ctx context.Context, name string) (types.Migration, error) {
	rec, err := ms.m.Status(ctx, name)
	return wireMigration(rec), err
}

func wireMigration(rec migrate.Record) types.Migration {
	out := types.Migration{Instance: rec.Instance, UUID: rec.UUID, Source: rec.Source, Dest: rec.Dest, State: rec.State, Step: rec.Step,
		Error: rec.Error, WasRunning: rec.WasRunning, Bytes: rec.Bytes, CopySeconds: rec.Copy.Seconds(), Started: rec.Started, Updated: rec.Updated}
	if rec.Live != nil {
		out.Live, out.SwitchSeconds = true, rec.Live.Switch.Seconds()
	}
	for _, d := range rec.Disks {
		out.Disks = append(out.Disks, types.MigrationDisk{Name: d.Name, Size: d.Size, SHA256: d.SHA256, Backing: d.Backing})
	}
	return out
}
