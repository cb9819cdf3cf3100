package intake

import (
	"context"
	"crypto/subtle"
	"errors"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// CancelRequest asks to cancel one of the caller's jobs.
type CancelRequest struct {
	Principal string
	JobID     uuid.UUID
	// IdempotencyKey is the normalised cancellation key; required.
	IdempotencyKey string
}

// CancelResult is the cancelled job.
type CancelResult struct {
	// Job is the job's state: CANCELLED.
	Job pg.Job
	// Replayed is true when an earlier request with the same key cancelled it.
	Replayed bool
	// PreviousStatus is PENDING or RUNNING when this call cancelled the job.
	PreviousStatus string
}

// Cancel moves the caller's PENDING or RUNNING job to CANCELLED with one
// conditional UPDATE (see pg.CancelJob), which also clears the payload and
// the lease and writes the lifecycle (and, for RUNNING, lease revocation)
// outbox rows. When the UPDATE matches nothing the row tells why:
//   - absent or foreign job: ErrJobNotFound;
//   - CANCELLED with the same key: the job, Replayed true;
//   - CANCELLED with another key: ErrCancellationKeyReused;
//   - SUCCEEDED: ErrAlreadySucceeded; FAILED: ErrAlreadyFailed.
//
// A missing or invalid key is ErrCancellationKeyRequired (checked after
// the principal, before any database access).
func (s *Service) Cancel(ctx context.Context, req CancelRequest) (CancelResult, error) {
	res, err := s.cancel(ctx, req)
	if err == nil {
		res.Job = s.withProgress(ctx, res.Job)
	}
	switch {
	case err == nil && res.Replayed:
		s.countCancel(metrics.CancellationReplayed)
	case err == nil:
		s.countCancel(metrics.CancellationCancelled)
	case errors.Is(err, ErrJobNotFound):
		s.countCancel(metrics.CancellationNotFound)
	case errors.Is(err, ErrCancellationKeyReused), errors.Is(err, ErrAlreadySucceeded), errors.Is(err, ErrAlreadyFailed):
		s.countCancel(metrics.CancellationConflict)
	}
	return res, err
}

// CountCancelNotFound counts a cancellation a transport answered with
// etl_job_not_found before calling Cancel (a malformed job id).
func (s *Service) CountCancelNotFound() { s.countCancel(metrics.CancellationNotFound) }

func (s *Service) cancel(ctx context.Context, req CancelRequest) (CancelResult, error) {
	scope, err := s.scope(req.Principal)
	if err != nil {
		return CancelResult{}, err
	}
	if !ValidKey(req.IdempotencyKey) {
		return CancelResult{}, ErrCancellationKeyRequired
	}
	keyHash := CancellationKeyHash(scope, req.JobID.String(), req.IdempotencyKey)
	out, err := pg.CancelJob(ctx, s.db, pg.CancelParams{
		PrincipalScopeHash: scope, JobID: req.JobID, CancellationKeyHash: keyHash,
	})
	if errors.Is(err, pg.ErrNotFound) {
		return CancelResult{}, ErrJobNotFound
	}
	if err != nil {
		return CancelResult{}, storeError(err)
	}
	if out.Cancelled {
		return CancelResult{Job: out.Job, PreviousStatus: out.PreviousStatus}, nil
	}
	switch out.Job.Status {
	case pg.StatusCancelled:
		if subtle.ConstantTimeCompare([]byte(out.StoredKeyHash), []byte(keyHash)) == 1 {
			return CancelResult{Job: out.Job, Replayed: true}, nil
		}
		return CancelResult{}, ErrCancellationKeyReused
	case pg.StatusSucceeded:
		return CancelResult{}, ErrAlreadySucceeded
	case pg.StatusFailed:
		return CancelResult{}, ErrAlreadyFailed
	}
	// PENDING/RUNNING after a zero-row conditional UPDATE cannot happen
	// (READ COMMITTED re-checks a locked row); refuse rather than guess.
	return CancelResult{}, ErrInternal
}
