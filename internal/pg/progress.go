package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// Progress is the committed checkpoint of a chunked job's load
// (etl_chunked_loads, migration 00023): what the worker's last chunk
// transaction recorded under the exact lease. It never holds a record.
type Progress struct {
	// RecordsLoaded is the number of records whose transformed rows are in
	// the target (not yet visible while the load is LOADING).
	RecordsLoaded int64
	// RecordsTotal is the payload's record count when the intake counted it
	// at submit, nil when unknown.
	RecordsTotal *int64
	// ChunksDone is the number of committed chunk transactions.
	ChunksDone int64
	// BadRecords is the number of records skipped under maxBadRecords.
	BadRecords int64
	// FailedRecordNumber is the record (line of JSON Lines, element of a
	// JSON array, 1-based) that failed the job, nil otherwise.
	FailedRecordNumber *int64
	// LastCheckpointAt is the database time of the last chunk commit, nil
	// before the first one.
	LastCheckpointAt *time.Time
	// PayloadBytes is the size of the (decompressed) payload.
	PayloadBytes int64
}

// progressSQL reads the checkpoints of the given jobs by primary key of
// etl_chunked_loads (one index probe per id). A plain snapshot read: the
// checkpoint is advisory display, so it takes no lock and may be newer
// than the job row read before it.
const progressSQL = `
SELECT l.job_record_id, l.records_loaded, l.records_total, l.chunks_done, l.bad_records,
       l.failed_record_number, l.checkpoint_at, l.payload_bytes
FROM etl_chunked_loads l
WHERE l.job_record_id = ANY($1::uuid[])`

// AttachProgress sets Progress on every job of kind etl_chunked in jobs
// from its load row, with one statement for all of them; it runs no
// statement when none is chunked, so the small-job reads cost nothing more.
// A chunked job whose load row is gone (pruned) keeps a nil Progress.
func AttachProgress(ctx context.Context, db DBTX, jobs []Job) error {
	var ids [][16]byte
	for _, j := range jobs {
		if j.Kind == KindETLChunked {
			ids = append(ids, j.JobID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := db.Query(ctx, progressSQL, ids)
	if err != nil {
		return fmt.Errorf("read progress: %w", err)
	}
	defer rows.Close()
	found := make(map[uuid.UUID]*Progress, len(ids))
	for rows.Next() {
		var id pgtype.UUID
		p := new(Progress)
		if err := rows.Scan(&id, &p.RecordsLoaded, &p.RecordsTotal, &p.ChunksDone, &p.BadRecords,
			&p.FailedRecordNumber, &p.LastCheckpointAt, &p.PayloadBytes); err != nil {
			return fmt.Errorf("read progress: scan: %w", err)
		}
		found[id.Bytes] = p
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read progress: %w", err)
	}
	for i := range jobs {
		if jobs[i].Kind == KindETLChunked {
			jobs[i].Progress = found[jobs[i].JobID]
		}
	}
	return nil
}

// BadRecord is one record skipped under maxBadRecords: its number (line
// of JSON Lines, element of a JSON array, 1-based) and the code that
// refused it; never the record.
type BadRecord struct {
	RecordNumber int64
	ErrorCode    string
}

// badRecordsSQL reads one page of a job's bad records, owner-scoped: the
// job row by primary key and owner, then its bad records after $3 in
// record-number order over etl_chunked_load_bad_records' primary key
// (job_record_id, record_number), so a page costs O($4) index entries.
// The LEFT JOIN keeps one all-NULL row for an owned job without (more)
// bad records; no row at all means absent or foreign.
const badRecordsSQL = `
SELECT b.record_number, b.error_code
FROM etl_job_records j
LEFT JOIN LATERAL (
    SELECT r.record_number, r.error_code
    FROM etl_chunked_load_bad_records r
    WHERE r.job_record_id = j.job_record_id AND r.record_number > $3
    ORDER BY r.record_number
    LIMIT $4
) b ON true
WHERE j.job_record_id = $1 AND j.principal_scope_hash = decode($2, 'hex')
ORDER BY b.record_number`

// ListBadRecords returns up to limit of the bad records of the job jobID
// with a record number above after (0 for the first page), in record
// number order, if the job belongs to principalScopeHash; ErrNotFound
// otherwise (absent and foreign jobs are indistinguishable). A job of any
// kind without bad records gives an empty page. limit must be at least 1.
func ListBadRecords(ctx context.Context, db DBTX, principalScopeHash string, jobID uuid.UUID, after int64, limit int) ([]BadRecord, error) {
	if limit < 1 {
		return nil, fmt.Errorf("list bad records: limit %d below 1", limit)
	}
	rows, err := db.Query(ctx, badRecordsSQL, jobID, principalScopeHash, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list bad records: %w", err)
	}
	defer rows.Close()
	owned := false
	out := make([]BadRecord, 0, min(limit, 128))
	for rows.Next() {
		owned = true
		var n *int64
		var code *string
		if err := rows.Scan(&n, &code); err != nil {
			return nil, fmt.Errorf("list bad records: scan: %w", err)
		}
		if n != nil && code != nil {
			out = append(out, BadRecord{RecordNumber: *n, ErrorCode: *code})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list bad records: %w", err)
	}
	if !owned {
		return nil, ErrNotFound
	}
	return out, nil
}

// OpsProgress is a chunked job's load as the operator console shows it:
// the checkpoint and what only an operator sees (load state, the bad-record
// allowance, how far into the payload the next record starts).
type OpsProgress struct {
	Progress
	// LoadState is LOADING, VISIBLE or DISCARDED.
	LoadState string
	// MaxBadRecords is the job's allowance of skipped records.
	MaxBadRecords int64
	// BytesDone is the payload offset at which the next record starts
	// (the checkpoint's part and offset as a byte count), nil once the
	// upload's parts are gone (a terminal job's).
	BytesDone *int64
	// CreatedAt is when the load row was written (the job's submission).
	CreatedAt time.Time
}

// opsProgressSQL reads one load by primary key; the byte position sums
// the sizes of the parts before the checkpoint's part over the primary key
// of etl_upload_parts (at most next_part_number - 1 rows of one upload).
// Parts deleted after the job ended give NULL for a position past part 1
// (least() would skip a NULL, hence the CASE).
const opsProgressSQL = `
SELECT l.records_loaded, l.records_total, l.chunks_done, l.bad_records, l.failed_record_number,
       l.checkpoint_at, l.payload_bytes, l.load_state, l.max_bad_records, l.created_at,
       CASE WHEN l.next_part_number = 1 THEN least(l.next_part_offset, l.payload_bytes)
            ELSE (SELECT CASE WHEN sum(p.part_bytes) IS NOT NULL
                              THEN least(sum(p.part_bytes)::bigint + l.next_part_offset, l.payload_bytes) END
                  FROM etl_upload_parts p
                  WHERE p.upload_id = l.upload_id AND p.part_number < l.next_part_number)
       END
FROM etl_chunked_loads l
WHERE l.job_record_id = $1`

// OpsJobProgress reads the load of the chunked job id for the operator;
// ErrNotFound when it has none.
func OpsJobProgress(ctx context.Context, db DBTX, id uuid.UUID) (OpsProgress, error) {
	var p OpsProgress
	err := db.QueryRow(ctx, opsProgressSQL, id).Scan(&p.RecordsLoaded, &p.RecordsTotal, &p.ChunksDone, &p.BadRecords,
		&p.FailedRecordNumber, &p.LastCheckpointAt, &p.PayloadBytes, &p.LoadState, &p.MaxBadRecords, &p.CreatedAt, &p.BytesDone)
	if IsNoRows(err) {
		return OpsProgress{}, ErrNotFound
	}
	if err != nil {
		return OpsProgress{}, fmt.Errorf("ops job progress: %w", err)
	}
	return p, nil
}

func init() {
	tracing.RegisterStatement("jobs.progress", progressSQL)
	tracing.RegisterStatement("jobs.bad_records", badRecordsSQL)
	tracing.RegisterStatement("ops.job_progress", opsProgressSQL)
}
