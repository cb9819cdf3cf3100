package pg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Retention of large (chunked) jobs (migration 00023, issue 32): the kinds
// below PruneKindChunkedQueue in PruneKinds. None has a window: each
// deletes rows nothing can use any more, as soon as that is so (a terminal
// job keeps no payload; its load's target rows are either visible for good
// or hidden for good). Every statement is one bounded batch ($1 rows at
// most) by the database clock; a kind runs its statements in order, each
// until a batch comes up short.
//
// No statement here locks with FOR UPDATE SKIP LOCKED (that would need an
// UPDATE privilege on these tables that the maintenance role has no
// business holding, deploy/postgres/least-privilege.sql): each is a plain
// DELETE (or UPDATE) of the rows a bounded subquery picked, whose own WHERE
// repeats every condition that another transaction could change, so a row
// changed concurrently is re-checked (READ COMMITTED re-evaluates the outer
// predicate on the newest row version) and a row deleted concurrently is
// skipped. A batch that lost rows to a concurrent pruner (the worker's own
// clean-up, `etlctl prune`, a crashed maintainer's overlap) comes up short
// and ends that kind for this run; the next run takes the rest.

// maxUploadChunkBatch bounds a batch of etl_upload_chunks rows: each holds
// up to a few MiB of payload (the intake writes at most 1 MiB per row), so a
// batch of the general size would delete gigabytes in one statement.
const maxUploadChunkBatch = 64

// discardLoadsSQL marks DISCARDED the LOADING loads whose job is FAILED or
// CANCELLED or gone (pruned). A load of a job that is PENDING or RUNNING is
// in flight, and one of a SUCCEEDED job is VISIBLE (the success transaction
// sets both), so neither is touched; a job leaves FAILED and CANCELLED
// never, so the mark is final. A chunk transaction inserts target rows only
// while it holds the job row under the exact lease, so once the job is
// terminal (committed) no row of the load is still to come. The outer
// load_state re-checks a load the worker discarded meanwhile.
const discardLoadsSQL = `
UPDATE etl_chunked_loads l
SET load_state = 'DISCARDED', updated_at = clock_timestamp()
WHERE l.load_state = 'LOADING'
  AND l.job_record_id IN (
    SELECT c.job_record_id FROM etl_chunked_loads c
    WHERE c.load_state = 'LOADING'
      AND NOT EXISTS (SELECT 1 FROM etl_job_records j
                      WHERE j.job_record_id = c.job_record_id
                        AND j.job_status IN ('PENDING', 'RUNNING', 'SUCCEEDED'))
    LIMIT $1)`

// pruneDiscardedRowsSQL deletes one batch of target rows of DISCARDED
// loads, through processed_data_job_record_index. They are hidden from
// processed_data_visible while their load row says DISCARDED; the load row
// goes only after the last of them (pruneChunkedLoadsSQL), since without it
// the view would show them. The job check repeats discardLoadsSQL's: a
// DISCARDED load of a job that is not FAILED, CANCELLED or gone is a bug
// elsewhere, and its rows are left alone rather than lost.
const pruneDiscardedRowsSQL = `
DELETE FROM processed_data d
WHERE d.processed_data_id IN (
    SELECT r.processed_data_id
    FROM etl_chunked_loads l
    JOIN processed_data r ON r.job_record_id = l.job_record_id AND r.job_record_id IS NOT NULL
    WHERE l.load_state = 'DISCARDED'
      AND NOT EXISTS (SELECT 1 FROM etl_job_records j
                      WHERE j.job_record_id = l.job_record_id
                        AND j.job_status IN ('PENDING', 'RUNNING', 'SUCCEEDED'))
    LIMIT $1)`

// pruneBadRecordsSQL deletes one batch of bad-record rows of pruned jobs
// (the job row is gone; the rows were listed only through it), found
// through the jobs' load rows, which stay until these are gone
// (pruneChunkedLoadsSQL), so the statement reads the few loads of pruned
// jobs and their bad records by primary key instead of the whole table.
const pruneBadRecordsSQL = `
DELETE FROM etl_chunked_load_bad_records b
WHERE (b.job_record_id, b.record_number) IN (
    SELECT c.job_record_id, c.record_number
    FROM etl_chunked_loads l
    JOIN etl_chunked_load_bad_records c ON c.job_record_id = l.job_record_id
    WHERE NOT EXISTS (SELECT 1 FROM etl_job_records j WHERE j.job_record_id = l.job_record_id)
    LIMIT $1)`

// pruneChunkedLoadsSQL deletes the load rows of pruned jobs (their job row
// is gone) once nothing of the job is left behind them: no bad record, and,
// unless the load is VISIBLE, no target row (DISCARDED rows are deleted
// first, above; deleting the load first would expose them through
// processed_data_visible, which hides only rows of loads that exist and are
// not VISIBLE; a VISIBLE load's rows stay visible without it). The load row
// of a job that still exists stays: it is the job's progress (records
// loaded, the failed record's number) until terminal-job retention prunes
// the job. A job is deleted only when terminal, so no chunk transaction can
// add a row after the NOT EXISTS looked.
const pruneChunkedLoadsSQL = `
DELETE FROM etl_chunked_loads l
WHERE l.job_record_id IN (
    SELECT c.job_record_id FROM etl_chunked_loads c
    WHERE NOT EXISTS (SELECT 1 FROM etl_job_records j WHERE j.job_record_id = c.job_record_id)
      AND NOT EXISTS (SELECT 1 FROM etl_chunked_load_bad_records b WHERE b.job_record_id = c.job_record_id)
      AND (c.load_state = 'VISIBLE'
           OR NOT EXISTS (SELECT 1 FROM processed_data r
                          WHERE r.job_record_id = c.job_record_id AND r.job_record_id IS NOT NULL))
    LIMIT $1)
  AND NOT EXISTS (SELECT 1 FROM etl_job_records j WHERE j.job_record_id = l.job_record_id)`

// pruneChunkedQueueSQL deletes one batch of etl_chunked_job_queue rows
// whose job is terminal or gone. The queue is a hint (the claim re-checks
// the job row), and the success and exhaustion transactions delete their
// row with the terminal state; this takes the rows of cancelled jobs (the
// cancel path knows no chunked queue) and of any other way out. A job is
// inserted with its queue row in one commit, so a queue row is never seen
// without its job merely uncommitted; terminal is final.
const pruneChunkedQueueSQL = `
DELETE FROM etl_chunked_job_queue q
WHERE q.job_record_id IN (
    SELECT c.job_record_id FROM etl_chunked_job_queue c
    WHERE NOT EXISTS (SELECT 1 FROM etl_job_records j
                      WHERE j.job_record_id = c.job_record_id AND j.job_status IN ('PENDING', 'RUNNING'))
    LIMIT $1)`

// pruneExpiredUploadsSQL deletes one batch of OPEN uploads whose expires_at
// has passed (database clock), along etl_upload_open_expiry_index. Only the
// upload row: its parts and chunks, then without an upload, go in batches
// of their own (pruneUploadPartsSQL, pruneUploadChunksSQL). Deleting the row
// first decides the race with the intake at once: a part commit or a
// submit of this upload that comes later finds no upload (and one that
// committed first made it SUBMITTED or moved its expiry, which the outer
// predicate re-checks).
const pruneExpiredUploadsSQL = `
DELETE FROM etl_uploads u
WHERE u.upload_id IN (
    SELECT e.upload_id FROM etl_uploads e
    WHERE e.upload_state = 'OPEN' AND e.expires_at < clock_timestamp()
    LIMIT $1)
  AND u.upload_state = 'OPEN' AND u.expires_at < clock_timestamp()`

// pruneTerminalUploadsSQL deletes one batch of SUBMITTED uploads whose job
// is terminal or gone: a terminal job keeps no payload, and a replay of it
// uploads its payload again. As above, only the upload row; the parts and
// chunks follow. A job is inserted in the commit that makes its upload
// SUBMITTED, so the job of a SUBMITTED upload is never merely uncommitted.
const pruneTerminalUploadsSQL = `
DELETE FROM etl_uploads u
WHERE u.upload_id IN (
    SELECT s.upload_id FROM etl_uploads s
    WHERE s.upload_state = 'SUBMITTED'
      AND NOT EXISTS (SELECT 1 FROM etl_job_records j
                      WHERE j.job_record_id = s.job_record_id AND j.job_status IN ('PENDING', 'RUNNING'))
    LIMIT $1)
  AND u.upload_state = 'SUBMITTED'`

// pruneUploadPartsSQL deletes one batch of part rows whose upload is gone.
// An upload row commits before any of its parts, so a part without one is
// never merely uncommitted.
const pruneUploadPartsSQL = `
DELETE FROM etl_upload_parts p
WHERE (p.upload_id, p.part_number) IN (
    SELECT q.upload_id, q.part_number FROM etl_upload_parts q
    WHERE NOT EXISTS (SELECT 1 FROM etl_uploads u WHERE u.upload_id = q.upload_id)
    LIMIT $1)`

// pruneUploadChunksSQL deletes one batch of chunk rows that nothing will
// read: those of an upload that is gone, and those of an attempt no part
// row points at in an upload whose expires_at has passed (database clock):
// a failed or replaced part. A part's chunks are written before its part
// row points at them, so an unexpired OPEN upload's unreferenced attempts
// may be a part still arriving, and they are left to the intake (which
// deletes a replaced attempt's chunks itself) or to the upload's expiry; a
// part is never committed into an expired or SUBMITTED upload. The chunks
// of a part whose upload is gone but whose part row is not yet are left
// for the next batch, after pruneUploadPartsSQL.
const pruneUploadChunksSQL = `
DELETE FROM etl_upload_chunks k
WHERE (k.upload_id, k.part_attempt_id, k.chunk_index) IN (
    SELECT c.upload_id, c.part_attempt_id, c.chunk_index
    FROM etl_upload_chunks c
    LEFT JOIN etl_uploads u ON u.upload_id = c.upload_id
    WHERE (u.upload_id IS NULL OR u.expires_at < clock_timestamp())
      AND NOT EXISTS (SELECT 1 FROM etl_upload_parts p
                      WHERE p.upload_id = c.upload_id AND p.part_attempt_id = c.part_attempt_id)
    LIMIT $1)`

// chunkedStep is one statement of a chunked kind and whether its rows
// count as deleted (the DISCARDED mark changes rows, deletes none).
type chunkedStep struct {
	what    string
	sql     string
	deletes bool
	// maxBatch, when positive, caps the batch size for this statement.
	maxBatch int
}

// chunkedSteps are each chunked kind's statements, in order.
var chunkedSteps = map[PruneKind][]chunkedStep{
	PruneKindChunkedQueue: {{what: "prune chunked queue rows", sql: pruneChunkedQueueSQL, deletes: true}},
	PruneKindDiscardedLoadRows: {
		{what: "discard loads of failed, cancelled and pruned jobs", sql: discardLoadsSQL},
		{what: "prune discarded load rows", sql: pruneDiscardedRowsSQL, deletes: true},
	},
	PruneKindBadRecords:      {{what: "prune bad records of pruned jobs", sql: pruneBadRecordsSQL, deletes: true}},
	PruneKindChunkedLoads:    {{what: "prune loads of pruned jobs", sql: pruneChunkedLoadsSQL, deletes: true}},
	PruneKindExpiredUploads:  {{what: "prune expired uploads", sql: pruneExpiredUploadsSQL, deletes: true}},
	PruneKindTerminalUploads: {{what: "prune uploads of terminal jobs", sql: pruneTerminalUploadsSQL, deletes: true}},
	PruneKindUploadParts:     {{what: "prune parts of pruned uploads", sql: pruneUploadPartsSQL, deletes: true}},
	PruneKindUploadChunks: {{what: "prune unreferenced upload chunks", sql: pruneUploadChunksSQL, deletes: true,
		maxBatch: maxUploadChunkBatch}},
}

// isChunkedKind reports whether kind is one of the chunked-job kinds.
func isChunkedKind(kind PruneKind) bool {
	_, ok := chunkedSteps[kind]
	return ok
}

// PruneChunked runs the chunked-job retention kind (PruneKindChunkedQueue
// and the kinds after it in PruneKinds) as `etlctl prune` does: each
// statement in batches of at most limit rows (at most 64 for upload
// chunks), each batch a READ COMMITTED transaction of its own, until a
// batch comes up short. It returns the rows deleted (a DISCARDED mark
// deletes none), also when ctx ends or a batch fails part way. Safe to run
// concurrently with the fleet, its maintainer and other pruners. limit
// must be at least 1.
func PruneChunked(ctx context.Context, db TxStarter, kind PruneKind, limit int) (int64, error) {
	exec := func(ctx context.Context, sql string, args ...any) (tag pgconn.CommandTag, err error) {
		err = WithTx(ctx, readCommittedBeginner{db}, func(tx pgx.Tx) error {
			tag, err = tx.Exec(ctx, sql, args...)
			return err
		})
		return tag, err
	}
	return pruneChunked(ctx, exec, kind, limit)
}

// pruneChunked runs kind's statements through exec, each in batches until
// one comes up short, and returns the rows deleted.
func pruneChunked(ctx context.Context, exec execFunc, kind PruneKind, limit int) (int64, error) {
	steps, ok := chunkedSteps[kind]
	if !ok {
		return 0, fmt.Errorf("prune: unknown kind %q", kind)
	}
	if limit < 1 {
		return 0, fmt.Errorf("prune %s: batch limit %d below 1", kind, limit)
	}
	var total int64
	for _, s := range steps {
		batch := limit
		if s.maxBatch > 0 {
			batch = min(batch, s.maxBatch)
		}
		deadlocks := 0
		for {
			if err := ctx.Err(); err != nil {
				return total, fmt.Errorf("%s: %w", s.what, err)
			}
			tag, err := exec(ctx, s.sql, batch)
			if lockFailure(err) == "40P01" && deadlocks < maxPruneRaceRetries {
				// Another deleter of the same rows (the worker's clean-up
				// of a load, another pruner) locked them in another order;
				// this batch was rolled back whole: run it again.
				deadlocks++
				continue
			}
			if err != nil {
				return total, fmt.Errorf("%s: %w", s.what, err)
			}
			if s.deletes {
				total += tag.RowsAffected()
			}
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
	}
	return total, nil
}
