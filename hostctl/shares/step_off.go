//go:build !vmetacrash

package shares

import "context"

// step marks a step of attach or detach. In a production build it only
// stops a cancelled operation; the test hooks (step_on.go) exist only in
// binaries built with the vmetacrash tag.
func (s *Service) step(ctx context.Context, _ string) error {
	return ctx.Err()
}
