package pg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// age moves a job's last change back by d (before any replay references it:
// the guard freezes a referenced job's updated_at).
func age(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, d time.Duration) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE etl_job_records
		SET updated_at = clock_timestamp() - $2::bigint * interval '1 microsecond' WHERE job_record_id = $1`, id, d.Microseconds()); err != nil {
		t.Fatal(err)
	}
}

func exists(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) bool {
	t.Helper()
	return pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_record_id = $1`, id) == 1
}

func TestPruneTerminalJobs(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	scope := repeatHex("a")
	const payload = `[{"id":"p"}]`
	const month = 30 * 24 * time.Hour
	old := 40 * 24 * time.Hour

	// An old chain root -> gen1 -> gen2 whose newest member is young: kept whole.
	root := failedJob(t, pool, scope, payload)
	age(t, pool, root, old)
	gen1, err := replay(pool, scope, root, "chain-1", payload)
	if err != nil {
		t.Fatal(err)
	}
	setTerminal(t, pool, gen1.Job.JobID, pg.StatusFailed)
	age(t, pool, gen1.Job.JobID, old)
	gen2, err := replay(pool, scope, gen1.Job.JobID, "chain-2", payload)
	if err != nil {
		t.Fatal(err)
	}
	setTerminal(t, pool, gen2.Job.JobID, pg.StatusSucceeded)

	// An old source with a PENDING replay: kept, and the replay too.
	busy := failedJob(t, pool, scope, payload)
	age(t, pool, busy, old)
	busyReplay, err := replay(pool, scope, busy, "busy-1", payload)
	if err != nil {
		t.Fatal(err)
	}
	age(t, pool, busyReplay.Job.JobID, old) // old but PENDING

	// Unreferenced old terminal jobs: removed. Young ones: kept.
	var doomed, young []uuid.UUID
	for i := range 7 {
		id := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: scope, Payload: payload})[0]
		setTerminal(t, pool, id, []string{pg.StatusFailed, pg.StatusSucceeded}[i%2])
		age(t, pool, id, old)
		doomed = append(doomed, id)
	}
	cancelled := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: scope, Payload: payload})[0]
	if _, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: scope, JobID: cancelled, CancellationKeyHash: repeatHex("c")}); err != nil {
		t.Fatal(err)
	}
	age(t, pool, cancelled, old)
	doomed = append(doomed, cancelled)
	for range 2 {
		id := failedJob(t, pool, scope, payload)
		age(t, pool, id, month-time.Hour)
		young = append(young, id)
	}

	// Batches of 3 (9 doomed: batches 3, 3, 3, 0).
	n, err := pg.PruneTerminalJobs(ctx, pool, month, 3)
	if err != nil || n != int64(len(doomed)) {
		t.Fatalf("pruned %d (%v), want %d", n, err, len(doomed))
	}
	for _, id := range doomed {
		if exists(t, pool, id) {
			t.Errorf("old unreferenced job %s kept", id)
		}
	}
	for _, id := range append(young, root, gen1.Job.JobID, gen2.Job.JobID, busy, busyReplay.Job.JobID) {
		if !exists(t, pool, id) {
			t.Errorf("job %s pruned", id)
		}
	}

	// Once the chain's newest member is old too, the chain goes newest first
	// in one call: every batch only removes jobs nothing references.
	if _, err := pool.Exec(ctx, `DELETE FROM etl_job_records WHERE job_record_id = $1`, root); pgCode(err) != "23503" {
		t.Fatalf("RESTRICT backstop: %v", err)
	}
	age(t, pool, gen2.Job.JobID, old)
	n, err = pg.PruneTerminalJobs(ctx, pool, month, 1)
	if err != nil || n != 3 {
		t.Fatalf("chain prune: %d %v", n, err)
	}
	for _, id := range []uuid.UUID{root, gen1.Job.JobID, gen2.Job.JobID} {
		if exists(t, pool, id) {
			t.Errorf("chain member %s kept", id)
		}
	}
	if !exists(t, pool, busy) || !exists(t, pool, busyReplay.Job.JobID) {
		t.Error("active chain pruned")
	}

	for _, bad := range []struct {
		d     time.Duration
		limit int
	}{{0, 10}, {-time.Hour, 10}, {time.Hour, 0}} {
		if _, err := pg.PruneTerminalJobs(ctx, pool, bad.d, bad.limit); err == nil {
			t.Errorf("window %s limit %d accepted", bad.d, bad.limit)
		}
	}
}

func TestPruneLedger(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	for i := range 5 {
		if _, _, err := pg.ClaimLedgerEntry(ctx, pool, pg.LedgerEntry{PrincipalScopeHash: repeatHex("a"),
			IdempotencyKeyHash: pgtest.SHA(fmt.Sprint("k", i)), RequestDigest: repeatHex("d"), ResponseText: "Processed: x\n"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE etl_idempotency_records SET created_at = clock_timestamp() - interval '40 days'
		WHERE idempotency_key_hash = ANY($1)`, []string{pgtest.SHA("k0"), pgtest.SHA("k1"), pgtest.SHA("k2")}); err != nil {
		t.Fatal(err)
	}
	n, err := pg.PruneLedger(ctx, pool, 720*time.Hour, 2)
	if err != nil || n != 3 {
		t.Fatalf("pruned %d %v", n, err)
	}
	if left := pgtest.Count(t, pool, `SELECT count(*) FROM etl_idempotency_records`); left != 2 {
		t.Fatalf("left %d", left)
	}
	if _, err := pg.PruneLedger(ctx, pool, 0, 2); err == nil {
		t.Error("zero window accepted")
	}
}

func TestPruneOutbox(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count)
		SELECT 'job_lifecycle', gen_random_uuid(), 'SUCCEEDED', 1 FROM generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	// The three oldest were never published for eight days.
	if _, err := pool.Exec(ctx, `UPDATE etl_outbox_events SET occurred_at = clock_timestamp() - interval '8 days'
		WHERE outbox_event_id IN (SELECT outbox_event_id FROM etl_outbox_events ORDER BY outbox_event_id LIMIT 3)`); err != nil {
		t.Fatal(err)
	}
	n, err := pg.PruneOutbox(ctx, pool, 168*time.Hour, 2)
	if err != nil || n != 3 {
		t.Fatalf("pruned %d %v", n, err)
	}
	if left := pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events`); left != 2 {
		t.Fatalf("left %d", left)
	}
}
