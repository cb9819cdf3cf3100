package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mightyetl/mightyetl/internal/maintenance"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// largeJobLeftovers writes by SQL what large jobs leave behind for
// retention: a cancelled job whose load still holds 5 target rows and
// whose queue row and SUBMITTED upload (2 parts of 2 chunks) remain; a
// pruned job's VISIBLE load with 2 bad records; an expired OPEN upload
// (1 part of 2 chunks, 1 unreferenced chunk); and a running job with its
// load (3 rows), queue row and upload, which must stay. It returns the
// running job.
func largeJobLeftovers(t *testing.T, pool *pgxpool.Pool) uuid.UUID {
	t.Helper()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatalf("fixture: %v\n%s", err, sql)
		}
	}
	job := func(status string) uuid.UUID {
		id := uuid.New()
		exec(`INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
			request_payload, job_status, max_attempts, attempt_count,
			lease_claim_id, lease_owner_id, lease_expires_at, lease_fencing_token,
			cancellation_key_hash, cancellation_code, job_cancelled_at)
		SELECT $1::uuid, 'etl_chunked', sha256('owner'::bytea), sha256($1::uuid::text::bytea), sha256('payload'::bytea),
			CASE WHEN s = 'RUNNING' THEN '{"uploadId":"x"}' END, s, 3, 1,
			CASE WHEN s = 'RUNNING' THEN gen_random_uuid() END, CASE WHEN s = 'RUNNING' THEN 'worker-fixture-1' END,
			CASE WHEN s = 'RUNNING' THEN clock_timestamp() + interval '1 hour' END, CASE WHEN s = 'RUNNING' THEN 1 END,
			CASE WHEN s = 'CANCELLED' THEN encode(sha256($1::uuid::text::bytea), 'hex') END,
			CASE WHEN s = 'CANCELLED' THEN 'etl_job_cancelled_by_owner' END,
			CASE WHEN s = 'CANCELLED' THEN clock_timestamp() END
		FROM (SELECT $2::text AS s) v`, id, status)
		return id
	}
	load := func(id uuid.UUID, state string, rows, bad int) {
		exec(`INSERT INTO etl_chunked_loads (job_record_id, upload_id, load_format, load_state, payload_bytes)
			VALUES ($1, gen_random_uuid(), 'jsonl', $2, 10)`, id, state)
		exec(`INSERT INTO processed_data (job_record_id, data, normalized_record)
			SELECT $1, 'ID:r,', '{}' FROM generate_series(1, $2::int)`, id, rows)
		exec(`INSERT INTO etl_chunked_load_bad_records (job_record_id, record_number, error_code)
			SELECT $1, g, 'etl_invalid_record' FROM generate_series(1, $2::int) g`, id, bad)
	}
	upload := func(state string, job *uuid.UUID, expiresIn string, parts, garbage int) {
		id := uuid.New()
		exec(`INSERT INTO etl_uploads (upload_id, principal_scope_hash, upload_format, upload_state, job_record_id, expires_at)
			VALUES ($1, sha256('owner'::bytea), 'jsonl', $2, $3, clock_timestamp() + $4::interval)`, id, state, job, expiresIn)
		// A committed part has 2 chunks, an unreferenced attempt 1.
		for n := 1; n <= parts+garbage; n++ {
			attempt, chunks := uuid.New(), 1
			if n <= parts {
				exec(`INSERT INTO etl_upload_parts (upload_id, part_number, part_attempt_id, part_bytes, part_sha256, chunk_count)
					VALUES ($1, $2, $3, 2, sha256('part'::bytea), 2)`, id, n, attempt)
				chunks = 2
			}
			exec(`INSERT INTO etl_upload_chunks (upload_id, part_attempt_id, chunk_index, chunk_data)
				SELECT $1, $2, g, '\x00'::bytea FROM generate_series(0, $3::int - 1) g`, id, attempt, chunks)
		}
	}
	cancelled, running := job(pg.StatusCancelled), job(pg.StatusRunning)
	for _, id := range []uuid.UUID{cancelled, running} {
		exec(`INSERT INTO etl_chunked_job_queue (job_record_id) VALUES ($1)`, id)
		upload("SUBMITTED", &id, "1 hour", 2, 0)
	}
	load(cancelled, "LOADING", 5, 0)
	load(running, "LOADING", 3, 0)
	load(uuid.New(), "VISIBLE", 0, 2)
	upload("OPEN", nil, "-1 second", 1, 1)
	return running
}

// The elected maintainer prunes what large jobs leave behind and counts
// it by kind; a running job's load, rows, queue row and upload stay.
func TestTheMaintainerPrunesLargeJobLeftovers(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	running := largeJobLeftovers(t, pool)
	a, am := newMaintainer(pool, "worker-a-0006")
	a.RunOnce(ctx)
	if !a.Leader() || testutil.ToFloat64(am.Runs.WithLabelValues(metrics.RunOK)) != 1 {
		t.Fatalf("leader %v, ok runs %v", a.Leader(), testutil.ToFloat64(am.Runs.WithLabelValues(metrics.RunOK)))
	}
	want := map[string]float64{
		metrics.PruneChunkedQueue:      1,
		metrics.PruneDiscardedLoadRows: 5,
		metrics.PruneBadRecords:        2,
		metrics.PruneChunkedLoads:      1,
		metrics.PruneExpiredUploads:    1,
		metrics.PruneTerminalUploads:   1,
		metrics.PruneUploadParts:       2 + 1,
		metrics.PruneUploadChunks:      2*2 + 2 + 1,
	}
	for kind, n := range want {
		if got := testutil.ToFloat64(am.Pruned.WithLabelValues(kind)); got != n {
			t.Errorf("pruned %s: %v, want %v", kind, got, n)
		}
	}
	for what, sql := range map[string]string{
		"queue":  `SELECT count(*) FROM etl_chunked_job_queue WHERE job_record_id = $1`,
		"load":   `SELECT count(*) FROM etl_chunked_loads WHERE job_record_id = $1 AND load_state = 'LOADING'`,
		"upload": `SELECT count(*) FROM etl_uploads WHERE job_record_id = $1`,
	} {
		if got := pgtest.Count(t, pool, sql, running); got != 1 {
			t.Errorf("the running job's %s: %d rows, want 1", what, got)
		}
	}
	if got := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data`); got != 3 {
		t.Errorf("%d target rows left, want the running job's 3", got)
	}
	if got := pgtest.Count(t, pool, `SELECT count(*) FROM etl_upload_chunks`); got != 4 {
		t.Errorf("%d chunks left, want the running job's 4", got)
	}
}

// A holder whose term was taken while it paused deletes nothing of large
// jobs either: every chunked kind's batch is fenced.
func TestAPausedHolderDeletesNoLargeJobLeftovers(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	largeJobLeftovers(t, pool)
	counts := func() [4]int {
		return [4]int{
			pgtest.Count(t, pool, `SELECT count(*) FROM processed_data`),
			pgtest.Count(t, pool, `SELECT count(*) FROM etl_upload_chunks`),
			pgtest.Count(t, pool, `SELECT count(*) FROM etl_uploads`),
			pgtest.Count(t, pool, `SELECT count(*) FROM etl_chunked_job_queue`),
		}
	}
	before := counts()
	a, am := newMaintainer(pool, "worker-a-0007")
	maintenance.SetBeforePrune(a, func() {
		expire(t, pool)
		if _, held, err := pg.TakeLeadership(ctx, pool, maintenance.LeaderName, "worker-b-0007", time.Hour); err != nil || !held {
			t.Errorf("b takes the expired row: %v %v", held, err)
		}
	})
	a.RunOnce(ctx)
	if after := counts(); after != before {
		t.Fatalf("the fenced holder deleted rows: %v -> %v", before, after)
	}
	if pgtest.Count(t, pool, `SELECT count(*) FROM etl_chunked_loads WHERE load_state = 'DISCARDED'`) != 0 {
		t.Fatal("the fenced holder marked a load")
	}
	if testutil.ToFloat64(am.Runs.WithLabelValues(metrics.RunFenced)) != 1 {
		t.Fatal("the run did not end fenced")
	}
}
