package intake

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// ReplayRequest asks to run one of the caller's FAILED or CANCELLED jobs
// again as a new job.
type ReplayRequest struct {
	Principal string
	// IdempotencyKey is the normalised replay key; required.
	IdempotencyKey string
	// JobID is the source job.
	JobID uuid.UUID
	// Body is the byte-identical original payload of the source. A terminal
	// job keeps only its digest, so the caller must resend it.
	Body []byte
	// Schedule is the replay job's priority (0: the source's) and notBefore
	// (zero: at once); not part of the request's identity.
	Schedule Schedule
}

// ReplayResult is the replay job a request created or replayed.
type ReplayResult struct {
	// Job is the replay job's current state (Job.Lineage is set).
	Job pg.Job
	// Replayed is true when an earlier request with the same key, source and
	// body created Job.
	Replayed bool
}

// Replay creates a new PENDING job from the caller's FAILED or CANCELLED
// job, with the same kind and max attempts and the resent body as its
// payload, plus its outbox wake-up, in one transaction (see pg.ReplayJob);
// the source never changes. The body is not parsed: its SHA-256 must equal
// the source's request_digest, which proves it is the payload that was
// validated at submission. Outcomes, in the order they are decided:
//   - blank principal: ErrPrincipalRequired; missing or invalid key:
//     ErrReplayKeyRequired; a priority outside 1..4: ErrInvalidPriority; a
//     notBefore beyond the horizon: ErrInvalidNotBefore (all before any
//     database access);
//   - absent or foreign source: ErrJobNotFound;
//   - the key already made a replay of this source with this body: that job,
//     Replayed true; of another source or body: ErrReplayKeyReused;
//   - source of kind etl_chunked (a large job, replayed by uploading its
//     payload again with replayOf): ErrReplayRequiresUpload;
//   - source PENDING or RUNNING: ErrReplaySourceActive; SUCCEEDED:
//     ErrReplaySourceSucceeded;
//   - body digest differs from the source's: ErrReplayPayloadMismatch
//     (nothing is written);
//   - source at generation 100: ErrReplayGenerationExhausted;
//   - over the caller's quota (a key without a job yet):
//     ErrOwnerQuotaExceeded (before the source is read);
//   - database unreachable: etl_target_unavailable (retry with the same key
//     and body).
//
// Concurrent replays of one source with one key converge on one job:
// exactly one result has Replayed false.
func (s *Service) Replay(ctx context.Context, req ReplayRequest) (ReplayResult, error) {
	scope, err := s.scope(req.Principal)
	if err != nil {
		return ReplayResult{}, err
	}
	if !ValidKey(req.IdempotencyKey) {
		return ReplayResult{}, ErrReplayKeyRequired
	}
	schedule, err := s.checkSchedule(req.Schedule)
	if err != nil {
		return ReplayResult{}, err
	}
	adm, err := s.admitOwner(ctx, req.Principal, scope, ReplayKeyHash(scope, req.IdempotencyKey))
	if err != nil {
		return ReplayResult{}, err
	}
	out, err := pg.ReplayJob(ctx, s.db, pg.ReplayParams{
		PrincipalScopeHash: scope,
		SourceJobID:        req.JobID,
		ReplayKeyHash:      ReplayKeyHash(scope, req.IdempotencyKey),
		RequestDigest:      RequestDigest(req.Body),
		Payload:            string(req.Body),
		Priority:           schedule.Priority,
		NotBefore:          schedule.NotBefore,
	})
	adm.settle(err == nil && out.Created)
	return s.replayResult(out, err)
}

// OperatorReplayRequest asks, as an operator, to run any owner's FAILED or
// CANCELLED job again as a new job of that owner.
type OperatorReplayRequest struct {
	// OperatorScopeHash is the operator's principal scope hash (the caller
	// decided it is an operator's).
	OperatorScopeHash string
	// IdempotencyKey is the normalised replay key; required. The console
	// form carries one drawn when the form was rendered.
	IdempotencyKey string
	// JobID is the source job.
	JobID uuid.UUID
	// Body is the byte-identical original payload of the source.
	Body []byte
}

// OperatorReplay is Replay for an operator: the source may be any owner's,
// the new job belongs to the source's owner, and the operator's scope hash
// is recorded on the new job's outbox row only (pg.OperatorReplayJob). The
// body's digest is computed as Replay computes it (RequestDigest) and the
// key hashed with OperatorReplayKeyHash. Outcomes and their order are
// Replay's; a blank scope hash is ErrPrincipalRequired and a missing or
// invalid key ErrReplayKeyRequired, both before any database access.
func (s *Service) OperatorReplay(ctx context.Context, req OperatorReplayRequest) (ReplayResult, error) {
	if req.OperatorScopeHash == "" {
		return ReplayResult{}, ErrPrincipalRequired
	}
	if !ValidKey(req.IdempotencyKey) {
		return ReplayResult{}, ErrReplayKeyRequired
	}
	out, err := pg.OperatorReplayJob(ctx, s.db, pg.OperatorReplayParams{
		SourceJobID:       req.JobID,
		OperatorScopeHash: req.OperatorScopeHash,
		ReplayKeyHash:     OperatorReplayKeyHash(req.OperatorScopeHash, req.IdempotencyKey),
		RequestDigest:     RequestDigest(req.Body),
		Payload:           string(req.Body),
	})
	return s.replayResult(out, err)
}

// replayResult reports a replay store call: a created replay job wakes the
// outbox relays (its job_available group row does not notify at commit,
// migration 00013).
func (s *Service) replayResult(out pg.ReplayOutcome, err error) (ReplayResult, error) {
	if err != nil {
		return ReplayResult{}, replayError(err)
	}
	if out.Created {
		s.wakeOutbox()
	}
	return ReplayResult{Job: out.Job, Replayed: !out.Created}, nil
}

// replayError maps a replay store error to the use case's error.
func replayError(err error) error {
	switch {
	case errors.Is(err, pg.ErrNotFound):
		return ErrJobNotFound
	case errors.Is(err, pg.ErrReplayKeyReused):
		return ErrReplayKeyReused
	case errors.Is(err, pg.ErrReplaySourceActive):
		return ErrReplaySourceActive
	case errors.Is(err, pg.ErrReplaySourceSucceeded):
		return ErrReplaySourceSucceeded
	case errors.Is(err, pg.ErrReplayPayloadMismatch):
		return ErrReplayPayloadMismatch
	case errors.Is(err, pg.ErrReplayGenerationExhausted):
		return ErrReplayGenerationExhausted
	case errors.Is(err, pg.ErrReplayRequiresUpload):
		return ErrReplayRequiresUpload
	}
	return storeError(err)
}
