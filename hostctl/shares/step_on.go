//go:build vmetacrash

package shares

import (
	"context"
	"os"
)

// stepHook, when set (tests built with -tags vmetacrash), is called
// before each step of attach and detach; an error stops the operation
// there as a crash would.
var stepHook func(step string) error

var pauseAt = os.Getenv(PauseEnv)

// step marks a step of attach or detach: the test hook runs, and the
// service pauses for good at the step PauseEnv names.
func (s *Service) step(ctx context.Context, name string) error {
	if stepHook != nil {
		if err := stepHook(name); err != nil {
			return err
		}
	}
	if pauseAt != "" && pauseAt == name {
		s.log.Warn("share operation paused for a test", "env", PauseEnv, "step", name)
		select {} // until the test kills the process
	}
	return ctx.Err()
}
