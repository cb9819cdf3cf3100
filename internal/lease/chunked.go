package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// Chunked (large) jobs, kind etl_chunked (migrations 00023 and 00024,
// design.md invariant 11). They are never in etl_job_claim_queue: they are
// listed in etl_chunked_job_queue and claimed by ClaimChunkedJobs, whose job
// row checks, lease columns and exhaustion are claimSQL's. Every later write
// is fenced by the whole exact lease like every other worker write: the
// chunk transaction's FenceChunk and CheckpointChunk, SucceedChunked,
// FailChunked, and Retry/Release (whose claim-queue updates match no row of
// a chunked job and so change nothing else).

// claimChunkedSQL takes up to $1 chunked jobs in one statement.
//
// Candidates are the rows of etl_chunked_job_queue, oldest first. The queue
// has no claimable time (RUNNING jobs stay in it), so it is read whole, up
// to 1000 rows, not along an eligibility index; it holds only the
// non-terminal chunked jobs, a few since each is large, so the bound is a
// guard. The queue row is only a hint: each candidate is re-checked on its
// etl_job_records row exactly as claimSQL does (PENDING and available, or
// RUNNING with an expired lease, by the database clock), which stays the
// authority. The picked jobs come back as claimSQL's candidate rows, in
// their order (oldest job first), which is the order of the claims.
//
// Locks: queue rows, then job rows, both FOR UPDATE SKIP LOCKED, as
// claimSQL: the claim never waits, so it is never part of a lock cycle with
// the writers that lock the job row first and the queue row second
// (SucceedChunked, FailChunked, a chunk transaction holding its job row).
//
// Writes: an exhausted expired lease becomes FAILED
// etl_worker_attempts_exhausted with its lifecycle outbox row, its load
// DISCARDED (its rows are then removed by the maintainer) and its queue row
// deleted; a claimed job gets claimSQL's lease columns (fresh claim id,
// owner $2, expiry from clock_timestamp() + $3 µs, a fencing token from the
// sequence, attempt + 1). Queue rows whose job is terminal or gone are
// deleted (a terminal chunked job whose own statement could not remove its
// queue row, e.g. a cancellation, which knows no chunked queue).
const claimChunkedSQL = `
WITH candidates AS (
    SELECT q.job_record_id
    FROM etl_chunked_job_queue q
    ORDER BY q.enqueued_at, q.job_record_id
    LIMIT 1000
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT j.job_record_id,
           (j.job_status = 'RUNNING' AND j.attempt_count >= j.max_attempts) AS exhausted,
           (extract(epoch FROM clock_timestamp() -
                CASE WHEN j.job_status = 'PENDING' THEN j.available_at ELSE j.lease_expires_at END) * 1000000)::bigint
               AS pickup_micros
    FROM etl_job_records j
    WHERE j.job_record_id = ANY(ARRAY(SELECT job_record_id FROM candidates))
      AND j.job_kind = 'etl_chunked'
      AND ((j.job_status = 'PENDING' AND j.available_at <= (SELECT clock_timestamp()))
        OR (j.job_status = 'RUNNING' AND j.lease_expires_at <= (SELECT clock_timestamp())))
    ORDER BY j.created_at, j.job_record_id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM etl_chunked_job_queue q
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM candidates))
      AND NOT EXISTS (SELECT 1 FROM etl_job_records j
                      WHERE j.job_record_id = q.job_record_id AND j.job_status IN ('PENDING', 'RUNNING'))
), exhausted AS (
    UPDATE etl_job_records j
    SET job_status = 'FAILED',
        failure_code = '` + codes.WorkerAttemptsExhausted + `',
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        updated_at = clock_timestamp()
    WHERE j.job_record_id = ANY(ARRAY(SELECT job_record_id FROM picked WHERE exhausted))
      AND j.job_status = 'RUNNING' AND j.attempt_count >= j.max_attempts
    RETURNING j.job_record_id, j.attempt_count
), exhausted_dequeued AS (
    DELETE FROM etl_chunked_job_queue q
    WHERE q.job_record_id = ANY(ARRAY(SELECT job_record_id FROM exhausted))
), exhausted_discarded AS (
    UPDATE etl_chunked_loads l
    SET load_state = 'DISCARDED', updated_at = clock_timestamp()
    WHERE l.job_record_id = ANY(ARRAY(SELECT job_record_id FROM exhausted))
      AND l.load_state = 'LOADING'
), exhausted_events AS (
    INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code)
    SELECT 'job_lifecycle', job_record_id, 'FAILED', attempt_count, '` + codes.WorkerAttemptsExhausted + `'
    FROM exhausted
), claimed AS (
    UPDATE etl_job_records j
    SET job_status = 'RUNNING',
        attempt_count = j.attempt_count + 1,
        lease_claim_id = gen_random_uuid(),
        lease_owner_id = $2,
        lease_expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond',
        lease_fencing_token = nextval('etl_lease_fencing_token_sequence'),
        updated_at = clock_timestamp()
    WHERE j.job_record_id = ANY(ARRAY(SELECT job_record_id FROM picked WHERE NOT exhausted))
      AND NOT (j.job_status = 'RUNNING' AND j.attempt_count >= j.max_attempts)
    RETURNING j.job_record_id, j.job_kind, j.lease_claim_id, j.lease_fencing_token,
              j.lease_expires_at, j.attempt_count, j.max_attempts,
              j.request_payload, j.request_digest, j.submit_traceparent
)
SELECT 1, job_record_id, job_kind, lease_claim_id, lease_fencing_token, lease_expires_at,
       attempt_count, max_attempts, request_payload, request_digest, NULL::bigint, submit_traceparent
FROM claimed
UNION ALL
SELECT 2, job_record_id, NULL, NULL, NULL, NULL, attempt_count, NULL, NULL, NULL, NULL, NULL
FROM exhausted
UNION ALL
SELECT 3, job_record_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, pickup_micros, NULL
FROM picked`

// ClaimChunkedJobs claims up to p.Limit chunked jobs (kind etl_chunked) for
// p.OwnerID in one statement, as ClaimJobs does for the other kinds (see
// claimChunkedSQL, whose rows have claimSQL's shape and are read by the
// same reader): PENDING jobs whose available_at has passed and RUNNING
// jobs whose lease expired, oldest first; expired leases on their last
// attempt become FAILED codes.WorkerAttemptsExhausted (load DISCARDED)
// instead. A claim's Payload is the job's manifest, not its records.
func ClaimChunkedJobs(ctx context.Context, db pg.DBTX, p ClaimParams) (ClaimResult, error) {
	res, err := claimJobs(ctx, db, claimChunkedSQL, p)
	if err != nil {
		return ClaimResult{}, fmt.Errorf("chunked: %w", err)
	}
	return res, nil
}

// fenceChunkSQL is the fenced statement of every chunk transaction, after
// its rows were written and before its checkpoint: the whole exact lease
// (design.md invariant 2), by the database clock, locking the job row FOR NO
// KEY UPDATE until the chunk commits or rolls back. While it is held, no
// claim can take the job (claims skip locked rows), a cancellation waits for
// the chunk's commit and then finds the new checkpoint, and renewal skips
// the row and reports the claim busy, not lost; a cancellation or a claim
// that committed before it makes it match nothing, and the chunk's rows roll
// back. (It comes after the rows so that the row is locked only for the
// checkpoint and the commit: chunks that follow each other without a gap
// would otherwise hold it nearly all the time, and renewal, which never
// waits, would find it busy at every try until the lease ran out.)
const fenceChunkSQL = `SELECT 1 FROM etl_job_records
    WHERE ` + exactLease + `
    FOR NO KEY UPDATE`

// FenceChunk runs the fenced statement of a chunk transaction in tx. It
// returns ErrLost when the exact lease does not hold: the caller must roll
// back, stop and never retry.
func FenceChunk(ctx context.Context, tx pg.DBTX, ref Ref) error {
	return execFenced(ctx, tx, "fence chunk", fenceChunkSQL, ref)
}

// Checkpoint is where a chunked load stands: the counts so far and where the
// next record starts (1-based part number, byte offset in that part, 1-based
// record number).
type Checkpoint struct {
	ChunksDone    int64
	RecordsLoaded int64
	BadRecords    int64
	NextPart      int64
	NextOffset    int64
	NextRecord    int64
}

// checkpointChunkSQL moves a LOADING load from checkpoint $4..$6 (next
// part, offset, record) to the next one, adding the chunk's counts, under
// the whole exact lease again (by the database clock at this statement: a
// chunk transaction that outlived its lease commits nothing). The expected
// old checkpoint makes a chunk apply exactly once even if two writers ever
// held the same start. checkpoint_at is the database clock.
const checkpointChunkSQL = `
UPDATE etl_chunked_loads l
SET chunks_done = l.chunks_done + 1,
    records_loaded = l.records_loaded + $7,
    bad_records = l.bad_records + $8,
    next_part_number = $9, next_part_offset = $10, next_record_number = $11,
    checkpoint_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE l.job_record_id = $1
  AND l.load_state = 'LOADING'
  AND l.next_part_number = $4 AND l.next_part_offset = $5 AND l.next_record_number = $6
  AND EXISTS (SELECT 1 FROM etl_job_records
              WHERE ` + exactLease + `)
RETURNING l.job_record_id`

// CheckpointChunk advances the load of ref's job from `from` by one chunk of
// loaded and bad records to `to` (only its Next* fields are read) inside
// the chunk transaction tx. It returns ErrLost when the lease no longer
// holds or the load is not at `from`: the caller must roll back, stop and
// never retry.
func CheckpointChunk(ctx context.Context, tx pg.DBTX, ref Ref, from, to Checkpoint, loaded, bad int64) error {
	return execFenced(ctx, tx, "checkpoint chunk", checkpointChunkSQL, ref,
		from.NextPart, from.NextOffset, from.NextRecord, loaded, bad, to.NextPart, to.NextOffset, to.NextRecord)
}

// ErrLoadMissing: a chunked job's lease held at its fenced success, but its
// load row was not LOADING (missing or already decided). Nothing was
// committed; the job's data cannot be trusted.
var ErrLoadMissing = errors.New("chunked load missing or not loading")

// succeedChunkedSQL is the fenced success of one chunked job: the job row
// SUCCEEDED (payload and lease cleared) under the whole exact lease, its
// load VISIBLE (records_total the records counted), its chunked queue row
// deleted and its lifecycle outbox row (the single-job shape, whose insert
// notifies the relays), all in one statement and so one commit: readers of
// processed_data_visible see all of the job's rows from that commit on and
// none before. Lock order: the job row, then the load and queue rows, as
// every writer but the (never waiting) claim.
const succeedChunkedSQL = `
WITH won AS (
    UPDATE etl_job_records
    SET job_status = 'SUCCEEDED',
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        updated_at = clock_timestamp()
    WHERE ` + exactLease + `
    RETURNING job_record_id, attempt_count
), visible AS (
    UPDATE etl_chunked_loads l
    SET load_state = 'VISIBLE', records_total = l.records_loaded + l.bad_records,
        updated_at = clock_timestamp()
    WHERE l.job_record_id = $1 AND l.load_state = 'LOADING'
      AND l.job_record_id IN (SELECT job_record_id FROM won)
    RETURNING l.job_record_id
), dequeued AS (
    DELETE FROM etl_chunked_job_queue q
    WHERE q.job_record_id = $1 AND q.job_record_id IN (SELECT job_record_id FROM won)
), events AS (
    INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count)
    SELECT 'job_lifecycle', job_record_id, 'SUCCEEDED', attempt_count FROM won
)
SELECT (SELECT count(*) FROM won), (SELECT count(*) FROM visible)`

// SucceedChunked applies the fenced terminal success of a chunked job in its
// own transaction on db: job SUCCEEDED, load VISIBLE, queue row deleted,
// lifecycle outbox row, all or nothing. It returns ErrLost when the lease
// did not match (nothing committed) and ErrLoadMissing when the lease
// matched but the load was not LOADING (nothing committed either).
func SucceedChunked(ctx context.Context, db pg.TxBeginner, ref Ref) error {
	var won, visible int64
	err := pg.WithTx(ctx, db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, succeedChunkedSQL, ref.JobID, ref.ClaimID, ref.OwnerID).Scan(&won, &visible); err != nil {
			return fmt.Errorf("succeed chunked job: %w", err)
		}
		switch {
		case won == 0:
			return ErrLost
		case visible == 0:
			return ErrLoadMissing
		}
		return nil
	})
	return err
}

// failChunkedSQL is failSQL for a chunked job: FAILED with code $4 under the
// whole exact lease, and in the same statement its load DISCARDED with the
// failed record number $5 (NULL: none), its chunked queue row deleted and
// its lifecycle outbox row. Its rows are removed afterwards in batches
// (chunked.Purge); the load row stays DISCARDED, which keeps them hidden
// until they are gone.
const failChunkedSQL = `
WITH moved AS (
    UPDATE etl_job_records
    SET job_status = 'FAILED',
        failure_code = $4,
        request_payload = NULL,
        lease_claim_id = NULL, lease_owner_id = NULL,
        lease_expires_at = NULL, lease_fencing_token = NULL,
        updated_at = clock_timestamp()
    WHERE ` + exactLease + `
    RETURNING job_record_id, attempt_count
), discarded AS (
    UPDATE etl_chunked_loads l
    SET load_state = 'DISCARDED', failed_record_number = $5::bigint, updated_at = clock_timestamp()
    WHERE l.job_record_id = $1 AND l.load_state = 'LOADING'
      AND l.job_record_id IN (SELECT job_record_id FROM moved)
), dequeued AS (
    DELETE FROM etl_chunked_job_queue q
    WHERE q.job_record_id = $1 AND q.job_record_id IN (SELECT job_record_id FROM moved)
), events AS (
    INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, event_code)
    SELECT 'job_lifecycle', job_record_id, 'FAILED', attempt_count, $4 FROM moved
)
SELECT job_record_id FROM moved`

// FailChunked moves the chunked job of an exact live lease to FAILED with
// the stable failure code, discarding its load (failedRecord > 0 is stored
// as failed_record_number; 0 stores none). It returns ErrLost when the lease
// did not match.
func FailChunked(ctx context.Context, db pg.DBTX, ref Ref, code string, failedRecord int64) error {
	var rec *int64
	if failedRecord > 0 {
		rec = &failedRecord
	}
	return execFenced(ctx, db, "fail chunked job", failChunkedSQL, ref, code, rec)
}

// RetryChunked returns the chunked job of an exact live lease to PENDING,
// claimable again after backoff (database clock), as Retry does: its load
// and checkpoint stay, so the next claimant resumes after the last
// committed chunk. It returns ErrLost when the lease did not match or no
// attempt is left.
func RetryChunked(ctx context.Context, db pg.DBTX, ref Ref, backoff time.Duration) error {
	return Retry(ctx, db, ref, backoff)
}

// Statement names for database spans (never the SQL text).
func init() {
	tracing.RegisterStatement("lease.claim_chunked", claimChunkedSQL)
	tracing.RegisterStatement("lease.fence_chunk", fenceChunkSQL)
	tracing.RegisterStatement("lease.checkpoint_chunk", checkpointChunkSQL)
	tracing.RegisterStatement("lease.succeed_chunked", succeedChunkedSQL)
	tracing.RegisterStatement("lease.fail_chunked", failChunkedSQL)
}
