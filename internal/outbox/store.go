package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mightyetl/mightyetl/internal/pg"
)

// row is one etl_outbox_events row.
type row struct {
	id           int64
	kind         string
	jobID        uuid.NullUUID
	status       *string
	attemptCount *int32
	code         *string
	occurredAt   time.Time
	// jobIDs and attempts are the parallel arrays of a group row (one row for
	// a whole finish group, migration 00006); nil for a plain row.
	jobIDs   []uuid.UUID
	attempts []int32
}

// events is how many events the row stands for.
func (r row) events() int {
	if r.jobIDs != nil {
		return len(r.jobIDs)
	}
	return 1
}

// selectBatchSQL locks up to $2 of the oldest rows of the kinds $1. FOR
// UPDATE SKIP LOCKED: rows another relay holds are skipped, not waited for,
// so concurrent relays split the outbox between them and each row is
// published by one relay per successful batch. The locks last until this
// batch's transaction ends.
const selectBatchSQL = `
SELECT outbox_event_id, event_kind, job_record_id, job_status, attempt_count, event_code, occurred_at,
       job_record_ids, attempt_counts
FROM etl_outbox_events
WHERE event_kind = ANY($1::text[])
ORDER BY outbox_event_id
LIMIT $2
FOR UPDATE SKIP LOCKED`

// deleteRowsSQL removes handled rows; they are locked by this transaction.
const deleteRowsSQL = `DELETE FROM etl_outbox_events WHERE outbox_event_id = ANY($1::bigint[])`

// backlogSQL measures the outbox. The age uses the database clock
// (clock_timestamp()), the same clock that stamped occurred_at.
const backlogSQL = `
SELECT count(*),
       COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(occurred_at)), 0)::float8
FROM etl_outbox_events`

func selectBatch(ctx context.Context, tx pgx.Tx, kinds []string, limit int) ([]row, error) {
	rows, err := tx.Query(ctx, selectBatchSQL, kinds, limit)
	if err != nil {
		return nil, fmt.Errorf("select outbox rows: %w", err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.kind, &r.jobID, &r.status, &r.attemptCount, &r.code, &r.occurredAt,
			&r.jobIDs, &r.attempts); err != nil {
			return nil, fmt.Errorf("scan outbox row: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("select outbox rows: %w", err)
	}
	return out, nil
}

func deleteRows(ctx context.Context, tx pgx.Tx, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, deleteRowsSQL, ids); err != nil {
		return fmt.Errorf("delete outbox rows: %w", err)
	}
	return nil
}

func measureBacklog(ctx context.Context, db pg.DBTX) (rows int64, oldestSeconds float64, err error) {
	if err := db.QueryRow(ctx, backlogSQL).Scan(&rows, &oldestSeconds); err != nil {
		return 0, 0, fmt.Errorf("measure outbox backlog: %w", err)
	}
	return rows, oldestSeconds, nil
}
