package pg_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// chunkedRetentionFixture writes the rows of large jobs by SQL (migration
// 00023's tables, as the intake and the worker leave them), so retention is
// tested against every state without running either.
type chunkedRetentionFixture struct {
	t    *testing.T
	pool *pgxpool.Pool
}

func (f chunkedRetentionFixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatalf("fixture: %v\n%s", err, sql)
	}
}

// job inserts a chunked job in status (PENDING, RUNNING, SUCCEEDED,
// FAILED or CANCELLED) with the lifecycle columns that status requires.
func (f chunkedRetentionFixture) job(status string) uuid.UUID {
	f.t.Helper()
	id := uuid.New()
	f.exec(`INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
		request_payload, job_status, max_attempts, attempt_count,
		lease_claim_id, lease_owner_id, lease_expires_at, lease_fencing_token,
		failure_code, cancellation_key_hash, cancellation_code, job_cancelled_at)
	SELECT $1::uuid, 'etl_chunked', sha256('owner'::bytea), sha256($1::uuid::text::bytea), sha256('payload'::bytea),
		CASE WHEN s IN ('PENDING', 'RUNNING') THEN '{"uploadId":"x","format":"jsonl","bytes":1,"parts":1,"maxBadRecords":0}' END,
		s, 3, CASE WHEN s = 'PENDING' THEN 0 ELSE 1 END,
		CASE WHEN s = 'RUNNING' THEN gen_random_uuid() END,
		CASE WHEN s = 'RUNNING' THEN 'worker-fixture-1' END,
		CASE WHEN s = 'RUNNING' THEN clock_timestamp() + interval '1 hour' END,
		CASE WHEN s = 'RUNNING' THEN 1 END,
		CASE WHEN s = 'FAILED' THEN 'etl_invalid_record' END,
		CASE WHEN s = 'CANCELLED' THEN encode(sha256($1::text::bytea), 'hex') END,
		CASE WHEN s = 'CANCELLED' THEN 'etl_job_cancelled_by_owner' END,
		CASE WHEN s = 'CANCELLED' THEN clock_timestamp() END
	FROM (SELECT $2::text AS s) v`, id, status)
	return id
}

// load inserts job's load in state with rows target rows (processed_data)
// and bad bad-record rows.
func (f chunkedRetentionFixture) load(job uuid.UUID, state string, rows, bad int) {
	f.t.Helper()
	f.exec(`INSERT INTO etl_chunked_loads (job_record_id, upload_id, load_format, load_state, payload_bytes, records_loaded)
		VALUES ($1, gen_random_uuid(), 'jsonl', $2, 100, $3)`, job, state, rows)
	f.exec(`INSERT INTO processed_data (job_record_id, data, normalized_record)
		SELECT $1, 'ID:r' || g || ',', '{}' FROM generate_series(1, $2::int) g`, job, rows)
	f.exec(`INSERT INTO etl_chunked_load_bad_records (job_record_id, record_number, error_code)
		SELECT $1, g, 'etl_invalid_record' FROM generate_series(1, $2::int) g`, job, bad)
}

// queued lists job in etl_chunked_job_queue.
func (f chunkedRetentionFixture) queued(job uuid.UUID) {
	f.t.Helper()
	f.exec(`INSERT INTO etl_chunked_job_queue (job_record_id) VALUES ($1)`, job)
}

// upload inserts an upload in state (job set when SUBMITTED) that expires
// in expiresIn (a PostgreSQL interval, negative: expired), with parts
// committed parts of two chunks each and garbage unreferenced attempts of
// three chunks each; it returns the upload id.
func (f chunkedRetentionFixture) upload(state string, job *uuid.UUID, expiresIn string, parts, garbage int) uuid.UUID {
	f.t.Helper()
	id := uuid.New()
	f.exec(`INSERT INTO etl_uploads (upload_id, principal_scope_hash, upload_format, upload_state, job_record_id, expires_at)
		VALUES ($1, sha256('owner'::bytea), 'jsonl', $2, $3, clock_timestamp() + $4::interval)`, id, state, job, expiresIn)
	for n := 1; n <= parts; n++ {
		attempt := uuid.New()
		f.exec(`INSERT INTO etl_upload_parts (upload_id, part_number, part_attempt_id, part_bytes, part_sha256, chunk_count)
			VALUES ($1, $2, $3, 2, sha256('part'::bytea), 2)`, id, n, attempt)
		f.chunks(id, attempt, 2)
	}
	for range garbage {
		f.chunks(id, uuid.New(), 3)
	}
	return id
}

// chunks inserts n one-byte chunks of attempt under upload (which need not
// exist).
func (f chunkedRetentionFixture) chunks(upload, attempt uuid.UUID, n int) {
	f.t.Helper()
	f.exec(`INSERT INTO etl_upload_chunks (upload_id, part_attempt_id, chunk_index, chunk_data)
		SELECT $1, $2, g, '\x00'::bytea FROM generate_series(0, $3::int - 1) g`, upload, attempt, n)
}

func (f chunkedRetentionFixture) count(sql string, args ...any) int {
	f.t.Helper()
	return pgtest.Count(f.t, f.pool, sql, args...)
}

// pruneChunkedKind runs kind unfenced with a batch of 2 (several batches
// per kind) and returns how many rows it deleted.
func pruneChunkedKind(t *testing.T, pool *pgxpool.Pool, kind pg.PruneKind) int64 {
	t.Helper()
	n, err := pg.PruneChunked(context.Background(), pool, kind, 2)
	if err != nil {
		t.Fatalf("prune %s: %v", kind, err)
	}
	return n
}

// The target rows of a FAILED, CANCELLED or pruned job's load are deleted,
// the load DISCARDED first and deleted only after its rows and only when
// its job is gone; at no step does processed_data_visible show a row of a
// load that did not succeed. Loads of PENDING, RUNNING and SUCCEEDED jobs,
// and rows of other jobs, are untouched.
func TestPruneChunkedDiscardsLoadsOfFailedCancelledAndPrunedJobs(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	f := chunkedRetentionFixture{t: t, pool: pool}

	pending, running, succeeded := f.job(pg.StatusPending), f.job(pg.StatusRunning), f.job(pg.StatusSucceeded)
	f.load(pending, "LOADING", 4, 1) // a retried job resumes at its checkpoint: its rows stay
	f.load(running, "LOADING", 3, 0)
	f.load(succeeded, "VISIBLE", 5, 2)
	failed, cancelled := f.job(pg.StatusFailed), f.job(pg.StatusCancelled)
	f.load(failed, "LOADING", 5, 2) // the worker died before its own clean-up
	f.load(cancelled, "LOADING", 3, 0)
	discarded := f.job(pg.StatusFailed)
	f.load(discarded, "DISCARDED", 2, 0) // the worker's clean-up stopped part way
	// Jobs pruned by terminal-job retention: their loads are left.
	prunedLoading, prunedVisible, prunedEmpty := uuid.New(), uuid.New(), uuid.New()
	f.load(prunedLoading, "LOADING", 3, 1)
	f.load(prunedVisible, "VISIBLE", 2, 3)
	f.load(prunedEmpty, "DISCARDED", 0, 0)
	// Rows of the synchronous path and of a small job.
	small := pgtest.InsertJobs(t, pool, pg.NewJob{})[0]
	f.exec(`INSERT INTO processed_data (job_record_id, data, normalized_record) VALUES (NULL, 'sync', '{}'), ($1, 'small', '{}')`, small)

	// Visible: the succeeded, pruned-visible, sync and small rows.
	const visibleRows = 5 + 2 + 2
	visible := func(when string) {
		t.Helper()
		if got := f.count(`SELECT count(*) FROM processed_data_visible`); got != visibleRows {
			t.Fatalf("%s: %d visible rows, want %d", when, got, visibleRows)
		}
	}
	visible("before")

	// The load rows wait for their target rows: nothing of a load is
	// deleted before its rows are gone.
	if n := pruneChunkedKind(t, pool, pg.PruneKindChunkedLoads); n != 1 {
		t.Fatalf("loads before the rows: deleted %d, want 1 (the empty load of a pruned job)", n)
	}
	visible("after the early load prune")

	if n := pruneChunkedKind(t, pool, pg.PruneKindDiscardedLoadRows); n != 5+3+2+3 {
		t.Fatalf("discarded load rows: deleted %d, want 13", n)
	}
	visible("after the rows")
	for id, want := range map[uuid.UUID]int{pending: 4, running: 3, succeeded: 5, failed: 0, cancelled: 0, discarded: 0,
		prunedLoading: 0, prunedVisible: 2} {
		if got := f.count(`SELECT count(*) FROM processed_data WHERE job_record_id = $1`, id); got != want {
			t.Errorf("rows of %v: %d, want %d", id, got, want)
		}
	}
	for id, want := range map[uuid.UUID]string{pending: "LOADING", running: "LOADING", succeeded: "VISIBLE",
		failed: "DISCARDED", cancelled: "DISCARDED", discarded: "DISCARDED", prunedLoading: "DISCARDED", prunedVisible: "VISIBLE"} {
		var got string
		if err := pool.QueryRow(context.Background(), `SELECT load_state FROM etl_chunked_loads WHERE job_record_id = $1`, id).Scan(&got); err != nil || got != want {
			t.Errorf("load of %v: %q %v, want %s", id, got, err, want)
		}
	}

	// Bad records go with their job; the loads of pruned jobs after them.
	if n := pruneChunkedKind(t, pool, pg.PruneKindBadRecords); n != 1+3 {
		t.Fatalf("bad records: deleted %d, want 4 (of the pruned jobs)", n)
	}
	if n := pruneChunkedKind(t, pool, pg.PruneKindChunkedLoads); n != 2 {
		t.Fatalf("loads: deleted %d, want 2 (of the pruned jobs)", n)
	}
	visible("after the loads")
	// The loads of jobs that exist stay (their progress: the failed
	// record, the counts), with their bad records.
	if got := f.count(`SELECT count(*) FROM etl_chunked_loads`); got != 6 {
		t.Fatalf("%d loads left, want 6 (one per existing job)", got)
	}
	if got := f.count(`SELECT count(*) FROM etl_chunked_load_bad_records`); got != 1+2+2 {
		t.Fatalf("%d bad records left, want 5", got)
	}
	if got := f.count(`SELECT count(*) FROM processed_data WHERE job_record_id IS NULL OR job_record_id = $1`, small); got != 2 {
		t.Fatalf("rows of other jobs: %d, want 2", got)
	}

	// A second run finds nothing.
	for _, kind := range pg.ChunkedPruneKinds {
		if n := pruneChunkedKind(t, pool, kind); n != 0 {
			t.Errorf("second run: %s deleted %d", kind, n)
		}
	}
}

// A DISCARDED load whose job is neither FAILED, CANCELLED nor gone (a bug
// elsewhere) keeps its rows: retention never deletes rows of a live or
// succeeded job.
func TestPruneChunkedKeepsRowsOfLiveJobsWhateverTheirLoadSays(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	f := chunkedRetentionFixture{t: t, pool: pool}
	for _, s := range []string{pg.StatusPending, pg.StatusRunning, pg.StatusSucceeded} {
		f.load(f.job(s), "DISCARDED", 3, 0)
	}
	for _, kind := range pg.ChunkedPruneKinds {
		if n := pruneChunkedKind(t, pool, kind); n != 0 {
			t.Errorf("%s deleted %d", kind, n)
		}
	}
	if got := f.count(`SELECT count(*) FROM processed_data`); got != 9 {
		t.Fatalf("%d rows left, want 9", got)
	}
}

// Expired OPEN uploads and uploads of terminal or pruned jobs go with
// their parts and chunks; chunks of attempts no part points at go once
// their upload has expired; live uploads and the chunks of their parts
// stay.
func TestPruneChunkedUploads(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	f := chunkedRetentionFixture{t: t, pool: pool}

	openLive := f.upload("OPEN", nil, "1 hour", 2, 1) // garbage may be a part still arriving: kept
	openExpired := f.upload("OPEN", nil, "-1 second", 3, 1)
	running, pending := f.job(pg.StatusRunning), f.job(pg.StatusPending)
	runningUpload := f.upload("SUBMITTED", &running, "1 hour", 2, 1)
	pendingExpired := f.upload("SUBMITTED", &pending, "-1 hour", 2, 2) // its garbage goes, its parts stay
	succeeded, failed, cancelled, pruned := f.job(pg.StatusSucceeded), f.job(pg.StatusFailed), f.job(pg.StatusCancelled), uuid.New()
	for _, j := range []uuid.UUID{succeeded, failed, cancelled, pruned} {
		f.upload("SUBMITTED", &j, "1 hour", 2, 1)
	}
	// An aborted upload (its row and parts deleted by the intake) left its
	// chunks; a part row of a vanished upload.
	f.chunks(uuid.New(), uuid.New(), 4)
	f.exec(`INSERT INTO etl_upload_parts (upload_id, part_number, part_attempt_id, part_bytes, part_sha256, chunk_count)
		VALUES (gen_random_uuid(), 1, gen_random_uuid(), 1, sha256('p'::bytea), 0)`)

	if n := pruneChunkedKind(t, pool, pg.PruneKindExpiredUploads); n != 1 {
		t.Fatalf("expired uploads: %d, want 1", n)
	}
	if n := pruneChunkedKind(t, pool, pg.PruneKindTerminalUploads); n != 4 {
		t.Fatalf("terminal uploads: %d, want 4", n)
	}
	if n := pruneChunkedKind(t, pool, pg.PruneKindUploadParts); n != 3+4*2+1 {
		t.Fatalf("upload parts: %d, want 12", n)
	}
	// expired: 3 parts x 2 + 3 garbage; terminal: 4 x (2 x 2 + 3);
	// pendingExpired: 2 x 3 garbage; aborted: 4.
	if n := pruneChunkedKind(t, pool, pg.PruneKindUploadChunks); n != 9+28+6+4 {
		t.Fatalf("upload chunks: %d, want 47", n)
	}
	uploads := f.count(`SELECT count(*) FROM etl_uploads`)
	if uploads != 3 || f.count(`SELECT count(*) FROM etl_uploads WHERE upload_id = ANY($1)`,
		[]uuid.UUID{openLive, runningUpload, pendingExpired}) != 3 {
		t.Fatalf("%d uploads left, want the live open one and the two of live jobs", uploads)
	}
	for id, want := range map[uuid.UUID][2]int{openLive: {2, 2*2 + 3}, runningUpload: {2, 2*2 + 3}, pendingExpired: {2, 2 * 2}, openExpired: {0, 0}} {
		parts := f.count(`SELECT count(*) FROM etl_upload_parts WHERE upload_id = $1`, id)
		chunks := f.count(`SELECT count(*) FROM etl_upload_chunks WHERE upload_id = $1`, id)
		if parts != want[0] || chunks != want[1] {
			t.Errorf("upload %v: %d parts, %d chunks; want %v", id, parts, chunks, want)
		}
	}
	// Every chunk left is one a part points at, or an unexpired upload's.
	if got := f.count(`SELECT count(*) FROM etl_upload_chunks c WHERE NOT EXISTS (SELECT 1 FROM etl_upload_parts p
		WHERE p.upload_id = c.upload_id AND p.part_attempt_id = c.part_attempt_id)`); got != 3+3 {
		t.Fatalf("%d unreferenced chunks left, want the 6 of the two unexpired uploads", got)
	}
}

// A chunk batch is at most 64 rows whatever the batch size (a chunk holds
// up to a MiB), and the kind still runs to the end.
func TestPruneChunkedUploadChunksInSmallBatches(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	f := chunkedRetentionFixture{t: t, pool: pool}
	f.chunks(uuid.New(), uuid.New(), 150)
	n, err := pg.PruneChunked(context.Background(), pool, pg.PruneKindUploadChunks, 1000)
	if err != nil || n != 150 {
		t.Fatalf("upload chunks: %d %v, want 150", n, err)
	}
	if got := f.count(`SELECT count(*) FROM etl_upload_chunks`); got != 0 {
		t.Fatalf("%d chunks left", got)
	}
}

// The chunked queue keeps the rows of PENDING and RUNNING jobs only.
func TestPruneChunkedQueue(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	f := chunkedRetentionFixture{t: t, pool: pool}
	live := []uuid.UUID{f.job(pg.StatusPending), f.job(pg.StatusRunning)}
	for _, id := range live {
		f.queued(id)
	}
	for _, s := range []string{pg.StatusSucceeded, pg.StatusFailed, pg.StatusCancelled} {
		f.queued(f.job(s))
	}
	f.queued(uuid.New())
	if n := pruneChunkedKind(t, pool, pg.PruneKindChunkedQueue); n != 4 {
		t.Fatalf("chunked queue: %d, want 4", n)
	}
	if got := f.count(`SELECT count(*) FROM etl_chunked_job_queue WHERE job_record_id = ANY($1)`, live); got != 2 ||
		f.count(`SELECT count(*) FROM etl_chunked_job_queue`) != 2 {
		t.Fatalf("queue after prune: %d of the live jobs, want exactly those 2", got)
	}
}

// The maintenance role of the grant script runs every chunked kind, fenced
// as the elected maintainer does; it reads no chunk's bytes, no target
// row's data, no upload's owner or digest and no checkpoint, and writes
// nothing but its deletes and the DISCARDED mark.
func TestMaintenanceRolePrunesChunkedJobsAndReadsNoPayload(t *testing.T) {
	admin, url := grantsSetup(t)
	ctx := context.Background()
	f := chunkedRetentionFixture{t: t, pool: admin}
	failed := f.job(pg.StatusFailed)
	f.load(failed, "LOADING", 3, 1)
	f.queued(failed)
	f.load(uuid.New(), "VISIBLE", 1, 2) // of a pruned job
	f.upload("OPEN", nil, "-1 second", 1, 1)
	f.upload("SUBMITTED", &failed, "1 hour", 1, 0)
	mp := rolePool(t, url, "mightyetl_maintenance_role")

	term, held, err := pg.TakeLeadership(ctx, mp, testLeader, "worker-m-chunked", time.Hour)
	if err != nil || !held {
		t.Fatalf("take as maintenance: %v %v", held, err)
	}
	fenced := pg.FencedPrune{Term: term, TTL: time.Hour, StatementTimeout: time.Minute}
	deleted := map[pg.PruneKind]int64{}
	for _, kind := range pg.ChunkedPruneKinds {
		n, err := fenced.Prune(ctx, mp, kind, 0, 2)
		if err != nil {
			t.Fatalf("prune %s as maintenance: %v", kind, err)
		}
		deleted[kind] = n
	}
	want := map[pg.PruneKind]int64{pg.PruneKindChunkedQueue: 1, pg.PruneKindDiscardedLoadRows: 3, pg.PruneKindBadRecords: 2,
		pg.PruneKindChunkedLoads: 1, pg.PruneKindExpiredUploads: 1, pg.PruneKindTerminalUploads: 1, pg.PruneKindUploadParts: 2,
		pg.PruneKindUploadChunks: 2 + 3 + 2}
	for k, n := range want {
		if deleted[k] != n {
			t.Errorf("%s as maintenance: deleted %d, want %d", k, deleted[k], n)
		}
	}
	if got := f.count(`SELECT count(*) FROM processed_data`); got != 1 {
		t.Fatalf("%d target rows left, want the pruned visible job's 1", got)
	}
	assertDenied(t, mp, "mightyetl_maintenance_role", map[string]string{
		"read a chunk's bytes":       `SELECT chunk_data FROM etl_upload_chunks`,
		"read target data":           `SELECT data FROM processed_data`,
		"read a normalized record":   `SELECT normalized_record FROM processed_data`,
		"read an upload's owner":     `SELECT principal_scope_hash FROM etl_uploads`,
		"read a part's digest":       `SELECT part_sha256 FROM etl_upload_parts`,
		"read a load's checkpoint":   `SELECT records_loaded FROM etl_chunked_loads`,
		"write a chunk":              `INSERT INTO etl_upload_chunks (upload_id, part_attempt_id, chunk_index, chunk_data) VALUES (gen_random_uuid(), gen_random_uuid(), 0, '\x00')`,
		"move a checkpoint":          `UPDATE etl_chunked_loads SET records_loaded = 0`,
		"extend an upload":           `UPDATE etl_uploads SET expires_at = clock_timestamp()`,
		"queue a chunked job":        `INSERT INTO etl_chunked_job_queue (job_record_id) VALUES (gen_random_uuid())`,
		"insert a bad record":        `INSERT INTO etl_chunked_load_bad_records (job_record_id, record_number, error_code) VALUES (gen_random_uuid(), 1, 'etl_invalid_record')`,
		"truncate the target":        `TRUNCATE processed_data`,
		"truncate the upload chunks": `TRUNCATE etl_upload_chunks`,
	})
}

// The way back below schema 24 as docs/operations/upgrades.md gives it:
// 00024's down refuses while a large job exists and changes nothing; after
// the large jobs are cancelled and deleted and their leftovers pruned, the
// down to 22 runs, and no target row a load had hidden becomes a visible
// row of processed_data.
func TestTheWayBackBelowSchema24(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	f := chunkedRetentionFixture{t: t, pool: pool}
	running, succeeded := f.job(pg.StatusRunning), f.job(pg.StatusSucceeded)
	f.load(running, "LOADING", 3, 1)
	f.queued(running)
	f.upload("SUBMITTED", &running, "1 hour", 2, 0)
	f.load(succeeded, "VISIBLE", 2, 1)
	f.upload("OPEN", nil, "1 hour", 1, 1) // an upload in progress
	small := pgtest.InsertJobs(t, pool, pg.NewJob{})[0]
	f.exec(`INSERT INTO processed_data (job_record_id, data, normalized_record) VALUES ($1, 'small', '{}')`, small)

	if err := pg.MigrateTo(ctx, pool, 22); err == nil || !strings.Contains(err.Error(), "chunked jobs exist") {
		t.Fatalf("the down below 24 while large jobs exist: %v, want the guard's refusal", err)
	}
	if applied, _, err := pg.SchemaVersion(ctx, pool); err != nil || applied != 24 {
		t.Fatalf("after the refused down: schema %d %v, want 24", applied, err)
	}
	// 2. cancel the running one (as the cancel statement does: no payload,
	// no lease); 3. delete the large jobs; 4. prune.
	f.exec(`UPDATE etl_job_records SET job_status = 'CANCELLED', request_payload = NULL, lease_claim_id = NULL,
		lease_owner_id = NULL, lease_expires_at = NULL, lease_fencing_token = NULL,
		cancellation_key_hash = repeat('c', 64), cancellation_code = 'etl_job_cancelled_by_owner', job_cancelled_at = clock_timestamp()
		WHERE job_record_id = $1`, running)
	f.exec(`DELETE FROM etl_job_records WHERE job_kind = 'etl_chunked'`)
	for _, kind := range pg.ChunkedPruneKinds {
		if _, err := pg.PruneChunked(ctx, pool, kind, 1000); err != nil {
			t.Fatalf("prune %s: %v", kind, err)
		}
	}
	if got := f.count(`SELECT count(*) FROM etl_chunked_loads WHERE load_state <> 'VISIBLE'`); got != 0 {
		t.Fatalf("%d hidden loads left after prune", got)
	}
	if err := pg.MigrateTo(ctx, pool, 22); err != nil {
		t.Fatalf("the down to 22 after the clean-up: %v", err)
	}
	// The succeeded job's 2 rows and the small job's 1: none of the
	// cancelled load's 3.
	if got := f.count(`SELECT count(*) FROM processed_data`); got != 3 ||
		f.count(`SELECT count(*) FROM processed_data WHERE job_record_id = $1`, running) != 0 {
		t.Fatalf("%d target rows on schema 22, want 3 and none of the cancelled load", got)
	}
}
