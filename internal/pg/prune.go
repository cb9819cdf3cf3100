package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultPruneBatch is a reasonable batch size for PruneTerminalJobs and
// PruneLedger: small enough that one DELETE holds its row locks briefly.
const DefaultPruneBatch = 1000

// pruneTerminalJobsSQL deletes one batch of terminal jobs whose updated_at
// is older than $1 microseconds before the database clock
// (clock_timestamp(), so no process clock decides retention). A job that any
// replay references as source or root is kept (NOT EXISTS, through the
// lineage lookup indexes), so a chain is only ever shortened from its newest
// end and never left with a dangling reference. The backstop is the lineage
// guard of migration 00017 (the foreign keys are gone): a statement trigger
// after DELETE refuses, with 23503 named etl_job_replay_source_fk or
// etl_job_replay_root_fk, a delete that leaves a surviving replay pointing
// at a deleted job, and a replay's insert locks its source and root FOR KEY
// SHARE, so a concurrent delete of either waits for it and then sees the
// reference. Both see a replay committed after this statement began only
// through the fresh snapshot each statement takes at READ COMMITTED, which
// PruneTerminalJobs sets explicitly (the guard refuses a delete at any other
// level, migration 00019). Lock: FOR UPDATE SKIP LOCKED skips a source that a
// replay transaction holds, so pruning never waits on (or for) a replay, and
// two pruners never contend for one row.
const pruneTerminalJobsSQL = `
WITH doomed AS (
    SELECT j.job_record_id
    FROM etl_job_records j
    WHERE j.job_status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
      AND j.updated_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
      AND NOT EXISTS (SELECT 1 FROM etl_job_records r WHERE r.replay_source_job_record_id = j.job_record_id)
      AND NOT EXISTS (SELECT 1 FROM etl_job_records r WHERE r.replay_root_job_record_id = j.job_record_id)
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
)
DELETE FROM etl_job_records j USING doomed d WHERE j.job_record_id = d.job_record_id`

// pruneLedgerSQL deletes one batch of response-ledger rows created more than
// $1 microseconds before the database clock, oldest first along
// etl_idempotency_created_at_index. Lock: SKIP LOCKED leaves a row that a
// concurrent request is reading or claiming to that request.
const pruneLedgerSQL = `
WITH doomed AS (
    SELECT principal_scope_hash, idempotency_key_hash
    FROM etl_idempotency_records
    WHERE created_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM etl_idempotency_records r USING doomed d
WHERE r.principal_scope_hash = d.principal_scope_hash AND r.idempotency_key_hash = d.idempotency_key_hash`

// maxPruneRaceRetries bounds the retries of a batch that lost a race with a
// replay (the 00017 lineage guard refused it): each retry reads a fresh
// snapshot.
const maxPruneRaceRetries = 3

// PruneTerminalJobs deletes SUCCEEDED, FAILED and CANCELLED jobs whose last
// change (updated_at) is older than olderThan by the database clock, in
// batches of at most limit rows, each batch one statement in a transaction of
// its own begun at READ COMMITTED (whatever the session's
// default_transaction_isolation: the lineage guard refuses a delete at
// another level), until a batch comes up short. It never
// deletes a job that a replay references as its source or root. It returns
// the number of jobs deleted, also when ctx ends or a batch fails part way.
// olderThan must be positive and limit at least 1.
//
// Deleting a job frees its submission key: the same key then creates a new
// job. Target rows (processed_data) and ledger rows are not touched.
func PruneTerminalJobs(ctx context.Context, db TxStarter, olderThan time.Duration, limit int) (int64, error) {
	exec := func(ctx context.Context, sql string, args ...any) (tag pgconn.CommandTag, err error) {
		err = WithTx(ctx, readCommittedBeginner{db}, func(tx pgx.Tx) error {
			tag, err = tx.Exec(ctx, sql, args...)
			return err
		})
		return tag, err
	}
	return pruneBatches(ctx, exec, "prune terminal jobs", pruneTerminalJobsSQL, olderThan, limit)
}

// PruneLedger deletes response-ledger rows (etl_idempotency_records) created
// more than olderThan ago by the database clock, in batches of at most limit
// rows, until a batch comes up short, and returns how many it deleted.
// Deleting a row frees its synchronous-path key: the same key then runs the
// request again. olderThan must be positive and limit at least 1.
func PruneLedger(ctx context.Context, db DBTX, olderThan time.Duration, limit int) (int64, error) {
	return prune(ctx, db, "prune ledger", pruneLedgerSQL, olderThan, limit)
}

// pruneOutboxSQL deletes outbox rows no relay published within the window
// (NATS absent or down that long). It walks the primary key, oldest first:
// ids grow with time, so old rows come first.
const pruneOutboxSQL = `
WITH doomed AS (
    SELECT outbox_event_id
    FROM etl_outbox_events
    WHERE occurred_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
    ORDER BY outbox_event_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM etl_outbox_events o USING doomed d WHERE o.outbox_event_id = d.outbox_event_id`

// PruneOutbox deletes outbox rows older than olderThan (database clock) in
// batches of at most limit rows and returns how many it deleted. Only the
// relay deletes published rows; without a relay (NATS_URL unset) or during a
// long NATS outage, this keeps the outbox bounded. Wake-ups and revocations
// are advisory; a lifecycle event older than the window is dropped
// undelivered (the lifecycle stream keeps 7 days, so use a window at least
// that long when consumers rely on those events).
func PruneOutbox(ctx context.Context, db DBTX, olderThan time.Duration, limit int) (int64, error) {
	return prune(ctx, db, "prune outbox", pruneOutboxSQL, olderThan, limit)
}

// prune runs the batches of sql as statements on db (pruneBatches).
func prune(ctx context.Context, db DBTX, what, sql string, olderThan time.Duration, limit int) (int64, error) {
	return pruneBatches(ctx, db.Exec, what, sql, olderThan, limit)
}

// execFunc runs one statement; pruneBatches runs each batch through one.
type execFunc func(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)

// pruneBatches runs sql ($1 the window in microseconds, $2 the batch limit)
// through exec until a batch deletes fewer than limit rows, and returns the
// number deleted.
func pruneBatches(ctx context.Context, exec execFunc, what, sql string, olderThan time.Duration, limit int) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("%s: window %s is not positive", what, olderThan)
	}
	if limit < 1 {
		return 0, fmt.Errorf("%s: batch limit %d below 1", what, limit)
	}
	var total int64
	races := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("%s: %w", what, err)
		}
		tag, err := exec(ctx, sql, olderThan.Microseconds(), limit)
		if isForeignKeyViolation(err) && races < maxPruneRaceRetries {
			// A replay referenced a candidate after this statement's
			// snapshot; the lineage guard (00017) refused the whole batch.
			races++
			continue
		}
		if err != nil {
			return total, fmt.Errorf("%s: %w", what, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(limit) {
			return total, nil
		}
	}
}

// pruneOrphanQueueRowsSQL deletes claim-queue rows whose job row does not
// exist (etl_job_claim_queue has no foreign key, migration 00005). Every
// product statement writes a job row and its queue row together and deletes
// queue rows with their jobs, so only a hand-made row can be an orphan. A
// job and its queue row become visible in one commit, so the anti-join
// never sees a queue row whose job is merely uncommitted.
const pruneOrphanQueueRowsSQL = `
DELETE FROM etl_job_claim_queue q
WHERE NOT EXISTS (SELECT 1 FROM etl_job_records j WHERE j.job_record_id = q.job_record_id)`

// PruneOrphanQueueRows deletes claim-queue rows without a job and returns
// how many it deleted. The claim already skips them; this keeps them from
// being read again by every claim. It reads the whole queue (the active
// jobs) once.
func PruneOrphanQueueRows(ctx context.Context, db DBTX) (int64, error) {
	tag, err := db.Exec(ctx, pruneOrphanQueueRowsSQL)
	if err != nil {
		return 0, fmt.Errorf("prune orphan queue rows: %w", err)
	}
	return tag.RowsAffected(), nil
}
