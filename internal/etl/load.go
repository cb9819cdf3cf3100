package etl

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// copyThreshold is the row count from which LoadRows switches from one multi-row INSERT to
// COPY: below it the round trip of a single statement wins, above it COPY's streaming does.
const copyThreshold = 64

// insertProcessedRows inserts any number of rows in one statement and one round trip. The
// arrays are zipped by unnest, so row i takes element i of each; created_at defaults to
// clock_timestamp() (the real insertion time, not the transaction start).
const insertProcessedRows = `INSERT INTO processed_data (job_record_id, data, normalized_record)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::jsonb[])`

// TargetRow is one row for the processed_data table.
type TargetRow struct {
	// JobID is the job_record_id that loaded the row; uuid.Nil stores NULL (the synchronous
	// path, which has no job).
	JobID uuid.UUID
	// Data is Row.Data, stored in processed_data.data.
	Data string
	// Normalized is Row.Normalized, a JSON object stored in processed_data.normalized_record.
	Normalized []byte
}

// LoadRows inserts rows into processed_data within the caller's transaction tx, which the
// caller commits or rolls back; nothing is retried here. Fewer than 64 rows go in one
// multi-row INSERT, more through COPY. No rows is a no-op. Errors are wrapped as
// "load processed rows: %w" so pgconn errors stay matchable for the caller's mapping to
// etl_target_unavailable / etl_target_failure.
func LoadRows(ctx context.Context, tx pgx.Tx, rows []TargetRow) error {
	if len(rows) == 0 {
		return nil
	}
	if len(rows) < copyThreshold {
		jobIDs := make([]pgtype.UUID, len(rows))
		data := make([]string, len(rows))
		normalized := make([]string, len(rows))
		for i, r := range rows {
			jobIDs[i] = jobID(r.JobID)
			data[i] = r.Data
			normalized[i] = string(r.Normalized)
		}
		if _, err := tx.Exec(ctx, insertProcessedRows, jobIDs, data, normalized); err != nil {
			return fmt.Errorf("load processed rows: %w", err)
		}
		return nil
	}
	src := pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
		r := rows[i]
		return []any{jobID(r.JobID), r.Data, r.Normalized}, nil
	})
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"processed_data"},
		[]string{"job_record_id", "data", "normalized_record"}, src)
	if err != nil {
		return fmt.Errorf("load processed rows: %w", err)
	}
	if n != int64(len(rows)) {
		return fmt.Errorf("load processed rows: copied %d of %d rows", n, len(rows))
	}
	return nil
}

func jobID(id uuid.UUID) pgtype.UUID {
	return pgtype.UUID{Bytes: id, Valid: id != uuid.Nil}
}
