package pg

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// CancelParams identify one cancellation attempt.
type CancelParams struct {
	// PrincipalScopeHash is the caller; only its own job can match.
	PrincipalScopeHash string
	JobID              uuid.UUID
	// CancellationKeyHash is the domain-separated hash of the caller's key,
	// stored on the row when this call cancels it.
	CancellationKeyHash string
}

// CancelOutcome is what CancelJob found or did.
type CancelOutcome struct {
	// Job is the row's owner-visible state after the statement.
	Job Job
	// Cancelled is true when this call moved the job to CANCELLED.
	Cancelled bool
	// PreviousStatus is the state the call cancelled (PENDING or RUNNING);
	// empty when Cancelled is false.
	PreviousStatus string
	// StoredKeyHash is the cancellation_key_hash of an already CANCELLED row
	// (Cancelled false), to tell a replay from a key reuse.
	StoredKeyHash string
}

// cancelSQL is the only authority over a cancellation: one statement that
// moves the caller's PENDING or RUNNING row to CANCELLED and writes its outbox
// rows. It runs inside the SECURITY DEFINER function etl_cancel_job
// (migration 00009), so the intake's database role needs EXECUTE on it and no
// UPDATE on the job rows: it can clear a lease and a payload only this way,
// never write one. Lock: the FOR UPDATE subquery takes the row lock first and
// reads the status being replaced; under READ COMMITTED, when another
// transaction (a finishing worker, a claim, another cancel) holds the row, it
// waits and then re-checks the predicate against the committed version, so a
// row that became terminal in the meantime is simply not matched. The claim
// statement uses SKIP LOCKED and never waits on it. Clearing the payload and
// every lease column makes every later fenced write of the previous lease
// holder (renew, succeed, retry, fail, release) affect zero rows. Time:
// clock_timestamp(), the database's time at execution. A revocation row is
// written only when the job was RUNNING, so workers can stop the handler
// early. The function returns previous_status, then jobColumns' columns;
// the job's priority (migration 00025, which the function predates) is read
// beside it: it never changes, so the row version the statement's snapshot
// sees has the same.
const cancelSQL = `SELECT c.previous_status, (SELECT r.job_priority FROM etl_job_records r WHERE r.job_record_id = $1),
       c.job_record_id, c.job_kind, c.job_status, c.attempt_count, c.failure_code, c.cancellation_code,
       c.created_at, c.updated_at, c.request_digest, c.replay_source_job_record_id,
       c.replay_root_job_record_id, c.replay_generation_count
FROM etl_cancel_job($1, $2, $3) c`

// cancelledStateSQL reads the caller's row after the conditional UPDATE
// matched nothing, in a fresh statement (and so a fresh READ COMMITTED
// snapshot that sees whatever terminal state won).
var cancelledStateSQL = `SELECT j.cancellation_key_hash, ` + scheduleColumns + `, ` + jobColumns + `
FROM etl_job_records j WHERE j.job_record_id = $1 AND j.principal_scope_hash = decode($2, 'hex')`

// CancelJob cancels the caller's job when it is PENDING or RUNNING (its
// cancellation_code becomes codes.CancelledByOwner), in one
// statement on db (a pool: the statement commits on its own; or the caller's
// transaction). When nothing was cancelled it reads the caller's row to say
// why: ErrNotFound for an absent or foreign job, otherwise the row with
// Cancelled false (terminal: SUCCEEDED, FAILED, or CANCELLED with
// StoredKeyHash). The decision to cancel is never taken on that read.
func CancelJob(ctx context.Context, db DBTX, p CancelParams) (CancelOutcome, error) {
	var out CancelOutcome
	row := db.QueryRow(ctx, cancelSQL, p.JobID, p.PrincipalScopeHash, p.CancellationKeyHash)
	var priority int64
	j, err := scanJob(row, &out.PreviousStatus, &priority)
	switch {
	case err == nil:
		j.Priority = int(priority)
		out.Job, out.Cancelled = j, true
		return out, nil
	case !IsNoRows(err):
		return CancelOutcome{}, fmt.Errorf("cancel job: %w", err)
	}
	out.PreviousStatus = ""
	var stored *string
	j, err = scanScheduledJob(db.QueryRow(ctx, cancelledStateSQL, p.JobID, p.PrincipalScopeHash), &stored)
	if IsNoRows(err) {
		return CancelOutcome{}, ErrNotFound
	}
	if err != nil {
		return CancelOutcome{}, fmt.Errorf("read cancelled job: %w", err)
	}
	out.Job = j
	if stored != nil {
		out.StoredKeyHash = *stored
	}
	return out, nil
}
