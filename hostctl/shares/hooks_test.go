package shares

import (
	"context"

	"github.com/vmeta/vmeta/internal/revert"
)

// The tests without a hypervisor play an instance's start with the
// part's phases as the core runs them (startDomain): BeforeStart, undone
// when it fails, then AfterStart.

// PrepareStart runs the part's BeforeStart for instance uuid, undone when
// it fails.
func (s *Service) PrepareStart(ctx context.Context, uuid string) (err error) {
	r := revert.New(s.log, "start "+uuid)
	defer r.Fail(&err)
	if err := s.prepareStart(ctx, uuid, r); err != nil {
		return err
	}
	r.Success()
	return nil
}

// StartDone is the part's AfterStart for a start that succeeded.
func (s *Service) StartDone(ctx context.Context, uuid string, err error) {
	if err == nil {
		s.started(ctx, uuid)
	}
}
