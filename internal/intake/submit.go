package intake

import (
	"context"
	"errors"

	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// SubmitRequest is one durable-job submission.
type SubmitRequest struct {
	// Principal is the authenticated caller (non-blank).
	Principal string
	// IdempotencyKey is the normalised key (see ValidKey); required.
	IdempotencyKey string
	// Body is the exact request body; it becomes the job's payload.
	Body []byte
	// Kind is pg.KindETLRecords (a record batch) or pg.KindDiagnostic (see
	// ParseDiagnostic); empty means pg.KindETLRecords.
	Kind string
	// Schedule is the job's priority and notBefore; the zero value is
	// priority 2 at once. Not part of the request's identity.
	Schedule Schedule
}

// SubmitResult is the job a submission created or replayed.
type SubmitResult struct {
	// Job is the job's current state.
	Job pg.Job
	// Replayed is true when an earlier identical submission created Job.
	Replayed bool
}

// Submit validates and transforms the whole body, then creates the job and
// its outbox row in one transaction shared with concurrent submissions
// (group commit). Outcomes:
//   - new job: Replayed false;
//   - same principal and key, byte-identical body and same kind: the
//     existing job with its current status, Replayed true (also when the
//     first submission is still committing: exactly one caller gets false),
//     with the first submission's priority and notBefore whatever req's
//     Schedule (the schedule is not part of the request's identity);
//   - same key, other body or kind: ErrSubmissionKeyReused;
//   - invalid key: ErrInvalidIdempotencyKey; blank principal:
//     ErrPrincipalRequired; a priority outside 1..4: ErrInvalidPriority; a
//     notBefore beyond the horizon: ErrInvalidNotBefore; invalid body:
//     etl_invalid_json, etl_invalid_record or etl_batch_too_large, with
//     nothing written;
//   - over the caller's quota (a key without a job yet):
//     ErrOwnerQuotaExceeded, whose QuotaExceeded says when to retry;
//   - database unreachable: etl_target_unavailable, with nothing written
//     (retry with the same key and body).
//
// When ctx ends while the transaction is in flight Submit returns a
// etl_target_unavailable error, yet the job may have been created; a retry
// replays it.
func (s *Service) Submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	ctx, span := tracing.Start(ctx, "intake.submit")
	defer span.End()
	res, err := s.submit(ctx, req)
	outcome := metrics.SubmissionAccepted
	switch {
	case err != nil:
		outcome = metrics.SubmissionRejected
		s.countRejection(CodeOf(err))
	case res.Replayed:
		outcome = metrics.SubmissionReplayed
	}
	s.count(outcome)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrOutcome.String(outcome))
		if res.Job.Kind != "" {
			span.SetAttributes(tracing.AttrJobKind.String(res.Job.Kind))
		}
		var ie *Error
		if errors.As(err, &ie) {
			tracing.Fail(span, ie.Code)
		}
	}
	return res, err
}

func (s *Service) submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	scope, err := s.scope(req.Principal)
	if err != nil {
		return SubmitResult{}, err
	}
	if !ValidKey(req.IdempotencyKey) {
		return SubmitResult{}, ErrInvalidIdempotencyKey
	}
	schedule, err := s.checkSchedule(req.Schedule)
	if err != nil {
		return SubmitResult{}, err
	}
	kind := req.Kind
	switch kind {
	case "", pg.KindETLRecords:
		kind = pg.KindETLRecords
		if err := etl.Validate(req.Body, s.maxRecords); err != nil {
			return SubmitResult{}, fromETL(err)
		}
	case pg.KindDiagnostic:
		if _, err := ParseDiagnostic(req.Body, s.maxRecords); err != nil {
			return SubmitResult{}, err
		}
	default:
		return SubmitResult{}, ErrInternal
	}
	digest := RequestDigest(req.Body)
	sub := &submission{
		job: pg.NewJob{
			Kind:               kind,
			PrincipalScopeHash: scope,
			SubmissionKeyHash:  SubmissionKeyHash(scope, req.IdempotencyKey),
			RequestDigest:      digest,
			Payload:            string(req.Body),
			MaxAttempts:        s.maxAttempts,
			// The intake.submit span's context, when tracing is on and
			// sampled: the execution links to it.
			SubmitTraceparent: tracing.Traceparent(ctx),
			Priority:          schedule.Priority,
			NotBefore:         schedule.NotBefore,
		},
		done: make(chan struct{}),
	}
	adm, err := s.admitOwner(ctx, req.Principal, scope, sub.job.SubmissionKeyHash)
	if err != nil {
		return SubmitResult{}, err
	}
	defer s.settleSubmission(ctx, adm, sub)
	// The group-commit wait: queueing for a batch plus its transaction.
	wctx, wspan := tracing.Start(ctx, "intake.group_commit")
	err = s.batcher.submit(wctx, sub)
	// groupSize is the flush's to write until it closes sub.done: read it
	// only when submit returned the settled outcome (a caller that gave up
	// on ctx may return while its round is still being written).
	groupSize := 0
	if sub.settled() {
		groupSize = sub.groupSize
	}
	tracing.EndBatch(wspan, groupSize, err)
	if err != nil {
		return SubmitResult{}, storeError(err)
	}
	if sub.res.Created {
		return SubmitResult{Job: sub.res.Job}, nil
	}
	if sub.res.RequestDigest != digest || sub.res.Kind != kind {
		return SubmitResult{}, ErrSubmissionKeyReused
	}
	return SubmitResult{Job: sub.res.Job, Replayed: true}, nil
}
