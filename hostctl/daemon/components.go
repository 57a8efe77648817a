package daemon

import (
	"context"
	"log/slog"
)

// component is one part of the daemon's start-up: start brings it up,
// stop (nil: nothing to stop) takes it down. The daemon's components
// form an ordered list (serve.components): started in order, stopped in
// reverse at shutdown, and, when one fails to start, the ones started
// before it are stopped in reverse.
type component struct {
	name  string
	start func(ctx context.Context) error
	stop  func(ctx context.Context) error
}

// startComponents starts cs in order. When cs[n] fails, cs[n-1] … cs[0]
// are stopped and its error is returned. Otherwise it returns the
// function that stops them all in reverse; each stop gets its own
// context, bounded by shutdownTimeout and not cancelled with ctx (the
// shutdown runs once ctx is done). A stop's error is logged and the
// other stops still run.
func startComponents(ctx context.Context, log *slog.Logger, cs []component) (stopAll func(), err error) {
	started := 0
	stopAll = func() {
		for i := started - 1; i >= 0; i-- {
			c := cs[i]
			if c.stop == nil {
				continue
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
			if err := c.stop(sctx); err != nil {
				log.Warn("stop "+c.name, "err", err)
			}
			cancel()
			log.Debug("stopped", "component", c.name)
		}
	}
	for _, c := range cs {
		if err := c.start(ctx); err != nil {
			log.Debug("start-up failed", "component", c.name, "err", err)
			stopAll()
			return nil, err
		}
		started++
		log.Debug("started", "component", c.name)
	}
	return stopAll, nil
}
