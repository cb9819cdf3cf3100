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

// operatorReplayGuardSQL reads the kind of source $1 (any owner's; the kind
// of a job never changes, so reading it before etl_operator_replay_job locks
// the row is race-free) and whether the replay key $3 already made a job for
// the source's owner. A large source (KindETLChunked) whose key made no job
// is refused here, after the not-found and key rules as ReplayJob orders
// them (etl_operator_replay_job would insert it into the claim queue): the
// same statement writes the refusal's audit row, exactly as operatorReplaySQL
// writes the function's refusals (operator $2, source $1, outcome
// codes.ReplayRequiresUpload). No row: the source is absent, which the
// function decides and audits. Column grants: the intake role reads these
// columns of every row (the console's job lists).
var operatorReplayGuardSQL = `
WITH s AS (
    SELECT s.job_kind,
           EXISTS (SELECT 1 FROM etl_job_records j
                   WHERE ` + pairOf("s.principal_scope_hash", "decode($3, 'hex')") + `) AS key_held
    FROM etl_job_records s
    WHERE s.job_record_id = $1
), audit AS (
    INSERT INTO etl_operator_audit_records (operator_principal_scope_hash, operator_action, job_record_id, outcome_code)
    SELECT decode($2, 'hex'), '` + AuditActionReplay + `', $1, '` + codes.ReplayRequiresUpload + `'
    FROM s
    WHERE s.job_kind = '` + KindETLChunked + `' AND NOT s.key_held
)
SELECT s.job_kind, s.key_held FROM s`

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
//   - source of kind KindETLChunked: ErrReplayRequiresUpload (checked by
//     operatorReplayGuardSQL before the function, audited the same way);
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
	var refused bool
	err := inReadCommitted(ctx, db, func(q DBTX) error {
		var (
			sourceKind string
			keyHeld    bool
		)
		err := q.QueryRow(ctx, operatorReplayGuardSQL, p.SourceJobID, p.OperatorScopeHash, p.ReplayKeyHash).
			Scan(&sourceKind, &keyHeld)
		switch {
		case IsNoRows(err):
			// Absent: the function answers not_found and audits it.
		case err != nil:
			return fmt.Errorf("read replay source kind: %w", err)
		case sourceKind == KindETLChunked && !keyHeld:
			refused = true
			return nil
		}
		err = q.QueryRow(ctx, operatorReplaySQL, p.SourceJobID, p.OperatorScopeHash, p.ReplayKeyHash,
			p.RequestDigest, p.Payload, p.JobID).
			Scan(&outcome, &id, &kind, &status, &attempts, &failure, &cancellation, &createdAt, &updatedAtTS,
				&digest, &source, &root, &generation)
		if err == nil && outcome == "created" && kind != nil && *kind == KindETLChunked {
			// The job holding the key of a large source vanished (was
			// pruned) between the guard and the function, which then
			// replayed it: roll it back, as the function's own vanished
			// case does; a retry with the same key is refused above.
			return ErrConflictVanished
		}
		return err
	})
	if err != nil {
		return ReplayOutcome{}, fmt.Errorf("operator replay job: %w", err)
	}
	if refused {
		return ReplayOutcome{}, ErrReplayRequiresUpload
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
