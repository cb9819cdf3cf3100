package pg

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// MaxReplayGeneration is the last generation of a replay chain
// (etl_job_replay_lineage_completeness_check): a job of this generation can
// no longer be replayed.
const MaxReplayGeneration = 100

// Replay refusals. ReplayJob returns them unwrapped; nothing was written.
var (
	// ErrReplaySourceActive: the source is PENDING or RUNNING.
	ErrReplaySourceActive = errors.New("replay source is active")
	// ErrReplaySourceSucceeded: the source SUCCEEDED; there is nothing to redo.
	ErrReplaySourceSucceeded = errors.New("replay source succeeded")
	// ErrReplayPayloadMismatch: the body's digest is not the source's
	// request_digest.
	ErrReplayPayloadMismatch = errors.New("replay payload does not match the source")
	// ErrReplayKeyReused: the replay key already made a replay of another
	// source or of another payload.
	ErrReplayKeyReused = errors.New("replay key reused")
	// ErrReplayGenerationExhausted: the source is a replay of generation
	// MaxReplayGeneration.
	ErrReplayGenerationExhausted = errors.New("replay generation exhausted")
	// ErrReplayRequiresUpload: the source is a large job (KindETLChunked);
	// it is replayed only by uploading its payload again and submitting the
	// upload with replayOf (SubmitUpload), never with a plain body, which
	// would make an etl_chunked job without a load in the claim queue.
	ErrReplayRequiresUpload = errors.New("replay of a large job requires an upload")
)

// ReplayParams identify one replay attempt.
type ReplayParams struct {
	// PrincipalScopeHash is the caller; only its own job can be a source.
	PrincipalScopeHash string
	// SourceJobID is the FAILED or CANCELLED job to replay.
	SourceJobID uuid.UUID
	// ReplayKeyHash is the domain-separated hash of the caller's replay key;
	// it becomes the new job's submission_key_hash, so one key makes at most
	// one job per principal.
	ReplayKeyHash string
	// RequestDigest is the hex SHA-256 of Payload.
	RequestDigest string
	// Payload is the resent original body; it becomes the new job's payload.
	Payload string
	// JobID is the new job's id; uuid.Nil draws a random one.
	JobID uuid.UUID
	// Priority is the new job's priority (1..4); 0 means the source's.
	Priority int
	// NotBefore is when the new job becomes claimable (NewJob.NotBefore);
	// zero means at once.
	NotBefore time.Time
}

// ReplayOutcome is the replay job ReplayJob created or found.
type ReplayOutcome struct {
	// Job is the replay job's current state; Job.Lineage is never nil.
	Job Job
	// Created is true when this call created Job, false when an earlier call
	// with the same key, source and payload did.
	Created bool
}

// lockReplaySourceSQL locks the caller's source row. Lock: FOR UPDATE
// serialises every replay of one source (a concurrent replay with the same
// key waits here and then finds the winner's job) and holds off any UPDATE
// of the source until the replay commits, so the lineage guard of such an
// UPDATE sees the new reference. Terminal rows are never written by the
// claim, renew, finish or cancel paths, so no worker ever waits on it.
const lockReplaySourceSQL = `
SELECT job_kind, job_status, max_attempts, encode(request_digest, 'hex'),
       replay_root_job_record_id, replay_generation_count
FROM etl_job_records
WHERE job_record_id = $1 AND principal_scope_hash = decode($2, 'hex')
FOR UPDATE`

// lockScheduledReplaySourceSQL is lockReplaySourceSQL that also reads the
// source's priority, the replay's default (ReplayJob).
var lockScheduledReplaySourceSQL = mustReplace(lockReplaySourceSQL,
	"replay_generation_count\n", "replay_generation_count, job_priority\n")

// replayByKeySQL reads the job the caller's replay key already made, if any,
// in a fresh READ COMMITTED snapshot (taken after the source lock, so it
// sees a concurrent winner that committed while this transaction waited).
// Found through the submission-key unique index (migration 00015).
var replayByKeySQL = `SELECT ` + jobColumns + `
FROM etl_job_records j
WHERE ` + pairOf("decode($1, 'hex')", "decode($2, 'hex')")

// scheduledReplayByKeySQL is replayByKeySQL that also reads
// scheduleColumns (for scanScheduledJob): ReplayJob's answer shows the
// job's priority and notBefore.
var scheduledReplayByKeySQL = `SELECT ` + scheduleColumns + `, ` + jobColumns + `
FROM etl_job_records j
WHERE ` + pairOf("decode($1, 'hex')", "decode($2, 'hex')")

// ReplayJob creates a new PENDING job that replays the caller's FAILED or
// CANCELLED job p.SourceJobID with p.Payload, and its job_available outbox
// row, in one transaction on db, begun at READ COMMITTED whatever the
// session's default_transaction_isolation when db is a pool or a connection
// (a pgx.Tx runs it in a savepoint at its own level). The source row is
// never written. In order:
//   - absent or foreign source: ErrNotFound;
//   - the key already made a job: that job (Created false) when it replays
//     this source with this digest, whatever the source's state now;
//     otherwise ErrReplayKeyReused;
//   - source of kind KindETLChunked: ErrReplayRequiresUpload (whatever its
//     state; the kind never changes);
//   - source PENDING or RUNNING: ErrReplaySourceActive; SUCCEEDED:
//     ErrReplaySourceSucceeded;
//   - p.RequestDigest differs from the source's request_digest:
//     ErrReplayPayloadMismatch;
//   - source of generation MaxReplayGeneration: ErrReplayGenerationExhausted;
//   - otherwise a new job with the source's kind and max_attempts, p's
//     priority (the source's when 0) and notBefore (at once when zero), lineage
//     generation 1 rooted at the source (a source without lineage) or the
//     source's generation + 1 with the source's root (Created true).
//
// Concurrent replays of one source with one key converge on one job; a
// concurrent replay of another source under the same key loses the unique
// (principal_scope_hash, submission_key_hash) race and is ErrReplayKeyReused.
func ReplayJob(ctx context.Context, db TxBeginner, p ReplayParams) (ReplayOutcome, error) {
	var out ReplayOutcome
	err := withReadCommittedTx(ctx, db, func(tx pgx.Tx) error {
		var (
			kind, status, digest string
			maxAttempts          int
			root                 *uuid.UUID
			generation           *int32
			priority             int64
		)
		err := tx.QueryRow(ctx, lockScheduledReplaySourceSQL, p.SourceJobID, p.PrincipalScopeHash).
			Scan(&kind, &status, &maxAttempts, &digest, &root, &generation, &priority)
		if IsNoRows(err) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock replay source: %w", err)
		}
		existing, err := scanScheduledJob(tx.QueryRow(ctx, scheduledReplayByKeySQL, p.PrincipalScopeHash, p.ReplayKeyHash))
		switch {
		case err == nil:
			out, err = sameReplay(existing, p)
			return err
		case !IsNoRows(err):
			return fmt.Errorf("read replay by key: %w", err)
		}
		if kind == KindETLChunked {
			return ErrReplayRequiresUpload
		}
		switch status {
		case StatusPending, StatusRunning:
			return ErrReplaySourceActive
		case StatusSucceeded:
			return ErrReplaySourceSucceeded
		}
		if subtle.ConstantTimeCompare([]byte(digest), []byte(p.RequestDigest)) != 1 {
			return ErrReplayPayloadMismatch
		}
		lineage := Lineage{SourceJobID: p.SourceJobID, RootJobID: p.SourceJobID, Generation: 1}
		if root != nil && generation != nil {
			if *generation >= MaxReplayGeneration {
				return ErrReplayGenerationExhausted
			}
			lineage.RootJobID, lineage.Generation = *root, int(*generation)+1
		}
		ins, err := InsertJobs(ctx, tx, []NewJob{{
			JobID: p.JobID, Kind: kind, PrincipalScopeHash: p.PrincipalScopeHash,
			SubmissionKeyHash: p.ReplayKeyHash, RequestDigest: p.RequestDigest, Payload: p.Payload,
			MaxAttempts: maxAttempts, Lineage: &lineage,
			// The replay's own priority and notBefore, else the source's
			// priority at once.
			Priority: cmp.Or(p.Priority, int(priority)), NotBefore: p.NotBefore,
			// The replay stores its own request's trace context (not the
			// source's): its execution links to the replay request.
			SubmitTraceparent: tracing.Traceparent(ctx),
		}})
		if err != nil {
			// ErrConflictVanished (the job holding the key was deleted
			// between two statements) stays distinct from an absent
			// source: the caller answers it as retryable.
			return fmt.Errorf("insert replay job: %w", err)
		}
		if !ins[0].Created {
			// Another source's replay under the same key committed between
			// the lookup and the insert.
			out, err = sameReplay(ins[0].Job, p)
			return err
		}
		out = ReplayOutcome{Job: ins[0].Job, Created: true}
		return nil
	})
	if err != nil {
		return ReplayOutcome{}, err
	}
	return out, nil
}

// sameReplay returns existing (the job holding the caller's replay key) when
// it replays p's source with p's digest, and ErrReplayKeyReused otherwise.
func sameReplay(existing Job, p ReplayParams) (ReplayOutcome, error) {
	if existing.Lineage == nil || existing.Lineage.SourceJobID != p.SourceJobID ||
		subtle.ConstantTimeCompare([]byte(existing.RequestDigest), []byte(p.RequestDigest)) != 1 {
		return ReplayOutcome{}, ErrReplayKeyReused
	}
	return ReplayOutcome{Job: existing}, nil
}
