package chunked

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// Batch sizes of the clean-up after a chunked job ended: processed_data
// rows per DELETE, and upload chunks (at most a few MiB each) per DELETE.
// Each DELETE is its own short statement, so the clean-up of a large load
// never holds one long transaction.
const (
	DefaultPurgeRows   = 10000
	DefaultPurgeChunks = 16
)

// discardSQL marks the LOADING load of a FAILED or CANCELLED (or deleted)
// job DISCARDED: a cancellation, which knows nothing of loads, leaves it
// LOADING. A job that is PENDING, RUNNING or SUCCEEDED is never touched.
// Terminal is final, so the job-state check cannot go stale after it.
const discardSQL = `
UPDATE etl_chunked_loads l
SET load_state = 'DISCARDED', updated_at = clock_timestamp()
WHERE l.job_record_id = $1 AND l.load_state = 'LOADING'
  AND NOT EXISTS (SELECT 1 FROM etl_job_records j
                  WHERE j.job_record_id = $1 AND j.job_status IN ('PENDING', 'RUNNING', 'SUCCEEDED'))`

// purgeRowsSQL deletes up to $2 processed_data rows of job $1, only while
// its load is DISCARDED: rows of a load that is LOADING or VISIBLE are never
// deleted here. The load row itself stays (DISCARDED hides nothing once the
// rows are gone, and it keeps the job's progress: counts and
// failed_record_number); the job's retention removes it with the job.
const purgeRowsSQL = `
DELETE FROM processed_data d
WHERE d.ctid = ANY(ARRAY(SELECT p.ctid FROM processed_data p WHERE p.job_record_id = $1 LIMIT $2))
  AND d.job_record_id = $1
  AND EXISTS (SELECT 1 FROM etl_chunked_loads l WHERE l.job_record_id = $1 AND l.load_state = 'DISCARDED')`

// purgeChunksSQL deletes up to $2 stored chunks of the upload of job $1
// once the job is terminal (a terminal job keeps no payload).
const purgeChunksSQL = `
DELETE FROM etl_upload_chunks c
WHERE c.ctid = ANY(ARRAY(
        SELECT x.ctid FROM etl_upload_chunks x
        WHERE x.upload_id = (SELECT l.upload_id FROM etl_chunked_loads l WHERE l.job_record_id = $1)
        LIMIT $2))
  AND EXISTS (SELECT 1 FROM etl_job_records j
              WHERE j.job_record_id = $1 AND j.job_status IN ('SUCCEEDED', 'FAILED', 'CANCELLED'))`

// PurgeResult is what a purge removed.
type PurgeResult struct {
	Rows, Chunks int64
}

// Purge cleans up after chunked job jobID ended: when it FAILED or was
// CANCELLED, its load becomes DISCARDED and its processed_data rows are
// deleted in statements of at most rows rows; for any terminal job the
// stored chunks of its upload are deleted, chunks at a time. Nothing
// happens to a job that is not terminal. It stops at ctx's end (what it
// deleted stays deleted; the maintainer finishes the rest) and is safe to
// run twice or concurrently.
func Purge(ctx context.Context, db pg.DBTX, jobID uuid.UUID, rows, chunks int) (PurgeResult, error) {
	var res PurgeResult
	if _, err := db.Exec(ctx, discardSQL, jobID); err != nil {
		return res, fmt.Errorf("purge chunked job: discard: %w", err)
	}
	for {
		tag, err := db.Exec(ctx, purgeRowsSQL, jobID, max(rows, 1))
		if err != nil {
			return res, fmt.Errorf("purge chunked job: rows: %w", err)
		}
		res.Rows += tag.RowsAffected()
		if tag.RowsAffected() == 0 {
			break
		}
	}
	for {
		tag, err := db.Exec(ctx, purgeChunksSQL, jobID, max(chunks, 1))
		if err != nil {
			return res, fmt.Errorf("purge chunked job: chunks: %w", err)
		}
		res.Chunks += tag.RowsAffected()
		if tag.RowsAffected() == 0 {
			return res, nil
		}
	}
}

func init() {
	tracing.RegisterStatement("chunked.discard", discardSQL)
	tracing.RegisterStatement("chunked.purge_rows", purgeRowsSQL)
	tracing.RegisterStatement("chunked.purge_chunks", purgeChunksSQL)
}
