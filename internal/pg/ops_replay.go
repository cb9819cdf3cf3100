package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
)

// OperatorReplayParams identify one operator replay.
type OperatorReplayParams struct {
	// SourceJobID is the FAILED or CANCELLED job to replay, of any owner.
	SourceJobID uuid.UUID
	// OperatorScopeHash is the operator's principal scope hash, recorded on
	// the new job's job_available outbox row (actor_principal_scope_hash)
	// and nowhere else.
	OperatorScopeHash string
	// ReplayKeyHash becomes the new job's submission_key_hash under the
	// source's owner, so one key makes at most one job per owner.
	ReplayKeyHash string
	// RequestDigest is the hex SHA-256 of Payload, computed as the owner's
	// replay computes it (intake.RequestDigest).
	RequestDigest string
	// Payload is the resent original body; it becomes the new job's payload.
	Payload string
	// JobID is the new job's id; uuid.Nil draws a time-ordered one (UUIDv7).
	JobID uuid.UUID
}

// operatorReplaySQL runs etl_operator_replay_job (migration 00011): the
// source lock (FOR UPDATE), the key lookup, the state, digest and generation
// checks, and the insert of the job, its claim-queue row and its outbox row,
// all in the function's one statement.
//
// The same statement records the call in the operator audit (migration
// 00020): one replay row naming the source and the job made or found again,
// outcome AuditOutcomeOK or the refusal's code, committed with the replay
// or not at all.
const operatorReplaySQL = `
WITH r AS (
    SELECT outcome, job_record_id, job_kind, job_status, attempt_count, failure_code,
           cancellation_code, created_at, updated_at, request_digest, replay_source_job_record_id,
           replay_root_job_record_id, replay_generation_count
    FROM etl_operator_replay_job($1, $2, $3, $4, $5, $6)
), audit AS (
    INSERT INTO etl_operator_audit_records (operator_principal_scope_hash, operator_action, job_record_id,
                                            replay_job_record_id, outcome_code)
    SELECT decode($2, 'hex'), '` + AuditActionReplay + `', $1, r.job_record_id,
           CASE r.outcome
               WHEN 'created' THEN '` + AuditOutcomeOK + `'
               WHEN 'replayed' THEN '` + AuditOutcomeOK + `'
               WHEN 'not_found' THEN '` + codes.JobNotFound + `'
               WHEN 'key_reused' THEN '` + codes.ReplayKeyReused + `'
               WHEN 'source_active' THEN '` + codes.ReplaySourceActive + `'
               WHEN 'source_succeeded' THEN '` + codes.ReplaySourceSucceeded + `'
               WHEN 'payload_mismatch' THEN '` + codes.ReplayPayloadMismatch + `'
               WHEN 'generation_exhausted' THEN '` + codes.ReplayGenerationExhausted + `'
           END
    FROM r
)
SELECT * FROM r`

// OperatorReplayJob creates a new PENDING job, owned by the source's owner,
// that replays any owner's FAILED or CANCELLED job p.SourceJobID with
// p.Payload, through etl_operator_replay_job, in a transaction begun at READ
// COMMITTED when db is a pool or a connection (a pgx.Tx runs it at its own
// level). The rules are ReplayJob's, in the same order, with the source's
// owner in place of the caller:
//   - absent source: ErrNotFound;
//   - the key already made a job for that owner: that job (Created false)
//     when it replays this source with this digest; otherwise
//     ErrReplayKeyReused;
//   - source PENDING or RUNNING: ErrReplaySourceActive; SUCCEEDED:
//     ErrReplaySourceSucceeded;
//   - p.RequestDigest differs from the source's: ErrReplayPayloadMismatch;
//   - source of generation MaxReplayGeneration: ErrReplayGenerationExhausted;
//   - otherwise the new job (Created true).
//
// Refusals write nothing but their audit row. A concurrent winner's row
// that vanished between two statements is a serialization failure
// (IsTransient): nothing is written, not even the audit row; retry with the
// same key and body.
func OperatorReplayJob(ctx context.Context, db DBTX, p OperatorReplayParams) (ReplayOutcome, error) {
	if p.JobID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return ReplayOutcome{}, fmt.Errorf("operator replay job: job id: %w", err)
		}
		p.JobID = id
	}
	var (
		outcome                string
		id                     *uuid.UUID
		kind, status, digest   *string
		attempts               *int
		failure, cancellation  *string
		source, root           *uuid.UUID
		generation             *int32
		createdAt, updatedAtTS *time.Time
	)
	// READ COMMITTED whatever the session's default, as every replay
	// (readCommitted); a caller's transaction keeps its own level.
	err := inReadCommitted(ctx, db, func(q DBTX) error {
		return q.QueryRow(ctx, operatorReplaySQL, p.SourceJobID, p.OperatorScopeHash, p.ReplayKeyHash,
			p.RequestDigest, p.Payload, p.JobID).
			Scan(&outcome, &id, &kind, &status, &attempts, &failure, &cancellation, &createdAt, &updatedAtTS,
				&digest, &source, &root, &generation)
	})
	if err != nil {
		return ReplayOutcome{}, fmt.Errorf("operator replay job: %w", err)
	}
	switch outcome {
	case "created", "replayed":
	case "not_found":
		return ReplayOutcome{}, ErrNotFound
	case "key_reused":
		return ReplayOutcome{}, ErrReplayKeyReused
	case "source_active":
		return ReplayOutcome{}, ErrReplaySourceActive
	case "source_succeeded":
		return ReplayOutcome{}, ErrReplaySourceSucceeded
	case "payload_mismatch":
		return ReplayOutcome{}, ErrReplayPayloadMismatch
	case "generation_exhausted":
		return ReplayOutcome{}, ErrReplayGenerationExhausted
	default:
		return ReplayOutcome{}, fmt.Errorf("operator replay job: unknown outcome %q", outcome)
	}
	if id == nil || kind == nil || status == nil || attempts == nil || digest == nil ||
		source == nil || root == nil || generation == nil || createdAt == nil || updatedAtTS == nil {
		return ReplayOutcome{}, fmt.Errorf("operator replay job: %s without its job", outcome)
	}
	j := Job{JobID: *id, Kind: *kind, Status: *status, AttemptCount: *attempts, FailureCode: failure,
		CancellationCode: cancellation, CreatedAt: *createdAt, UpdatedAt: *updatedAtTS, RequestDigest: *digest,
		Lineage: &Lineage{SourceJobID: *source, RootJobID: *root, Generation: int(*generation)}}
	return ReplayOutcome{Job: j, Created: outcome == "created"}, nil
}
