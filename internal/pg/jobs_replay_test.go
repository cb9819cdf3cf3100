package pg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// setTerminal moves a job to FAILED (with a failure code) or SUCCEEDED by
// SQL, clearing its payload as the lifecycle check requires.
func setTerminal(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, status string) {
	t.Helper()
	var code *string
	if status == pg.StatusFailed {
		c := codes.TargetFailure
		code = &c
	}
	tag, err := pool.Exec(context.Background(), `UPDATE etl_job_records SET job_status = $2, failure_code = $3,
		request_payload = NULL, updated_at = clock_timestamp() WHERE job_record_id = $1`, id, status, code)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("set %s: %v %v", status, err, tag)
	}
}

// failedJob inserts a job of scope with payload and fails it by SQL.
func failedJob(t *testing.T, pool *pgxpool.Pool, scope, payload string) uuid.UUID {
	t.Helper()
	id := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: scope, Payload: payload, MaxAttempts: 4})[0]
	setTerminal(t, pool, id, pg.StatusFailed)
	return id
}

func replay(pool *pgxpool.Pool, scope string, source uuid.UUID, key, payload string) (pg.ReplayOutcome, error) {
	return pg.ReplayJob(context.Background(), pool, pg.ReplayParams{PrincipalScopeHash: scope, SourceJobID: source,
		ReplayKeyHash: pgtest.SHA("replay:" + key), RequestDigest: pgtest.SHA(payload), Payload: payload})
}

func TestReplayJobOutcomes(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	alice, bob := repeatHex("a"), repeatHex("b")
	const payload = `[{"id":"r1"}]`

	pending := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: alice, Payload: payload, MaxAttempts: 4})[0]
	succeeded := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: alice, Payload: payload, MaxAttempts: 4})[0]
	setTerminal(t, pool, succeeded, pg.StatusSucceeded)
	failed := failedJob(t, pool, alice, payload)
	before := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`)

	for name, tc := range map[string]struct {
		scope  string
		source uuid.UUID
		body   string
		want   error
	}{
		"absent":    {alice, uuid.New(), payload, pg.ErrNotFound},
		"foreign":   {bob, failed, payload, pg.ErrNotFound},
		"pending":   {alice, pending, payload, pg.ErrReplaySourceActive},
		"succeeded": {alice, succeeded, payload, pg.ErrReplaySourceSucceeded},
		"mismatch":  {alice, failed, payload + " ", pg.ErrReplayPayloadMismatch},
	} {
		if _, err := replay(pool, tc.scope, tc.source, "k-"+name, tc.body); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`); n != before {
		t.Fatalf("refusals created %d jobs", n-before)
	}

	first, err := replay(pool, alice, failed, "k1", payload)
	if err != nil || !first.Created || first.Job.Status != pg.StatusPending || first.Job.Lineage == nil ||
		*first.Job.Lineage != (pg.Lineage{SourceJobID: failed, RootJobID: failed, Generation: 1}) {
		t.Fatalf("replay: %+v %v", first, err)
	}
	var kind string
	var maxAttempts int
	var keyHash string
	if err := pool.QueryRow(ctx, `SELECT job_kind, max_attempts, encode(submission_key_hash, 'hex') FROM etl_job_records WHERE job_record_id = $1`,
		first.Job.JobID).Scan(&kind, &maxAttempts, &keyHash); err != nil {
		t.Fatal(err)
	}
	if kind != pg.KindETLRecords || maxAttempts != 4 || keyHash != pgtest.SHA("replay:k1") {
		t.Errorf("replay row: kind %s max %d key ok %v", kind, maxAttempts, keyHash == pgtest.SHA("replay:k1"))
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_job_events WHERE job_record_id = $1 AND event_kind = 'job_available'`, first.Job.JobID); n != 1 {
		t.Errorf("outbox rows %d", n)
	}
	// Same key, source and payload: the same job, also once the replay itself failed.
	setTerminal(t, pool, first.Job.JobID, pg.StatusFailed)
	again, err := replay(pool, alice, failed, "k1", payload)
	if err != nil || again.Created || again.Job.JobID != first.Job.JobID {
		t.Fatalf("again: %+v %v", again, err)
	}
	// Same key for another source or payload: reused.
	other := failedJob(t, pool, alice, payload)
	if _, err := replay(pool, alice, other, "k1", payload); !errors.Is(err, pg.ErrReplayKeyReused) {
		t.Errorf("other source: %v", err)
	}
	if _, err := replay(pool, alice, failed, "k1", payload+" "); !errors.Is(err, pg.ErrReplayKeyReused) {
		t.Errorf("other payload: %v", err)
	}
	// The same key hash of another owner is another key.
	if _, err := replay(pool, bob, failed, "k1", payload); !errors.Is(err, pg.ErrNotFound) {
		t.Errorf("bob: %v", err)
	}
	// Generation 2 from the failed replay keeps the root.
	second, err := replay(pool, alice, first.Job.JobID, "k2", payload)
	if err != nil || *second.Job.Lineage != (pg.Lineage{SourceJobID: first.Job.JobID, RootJobID: failed, Generation: 2}) {
		t.Fatalf("second generation: %+v %v", second, err)
	}
	got, err := pg.GetJob(ctx, pool, alice, second.Job.JobID)
	if err != nil || got.Lineage == nil || *got.Lineage != *second.Job.Lineage {
		t.Errorf("GetJob lineage: %+v %v", got, err)
	}
}

// chainEnd inserts, by SQL, a FAILED chain root -> generation 1 -> a FAILED
// job of generation gen (gen >= 2) and returns the last job. scope and the
// digests are hex, decoded into the 32-byte columns (migration 00014).
func chainEnd(t *testing.T, pool *pgxpool.Pool, scope, payload string, gen int) uuid.UUID {
	t.Helper()
	root := failedJob(t, pool, scope, payload)
	first := uuid.New()
	last := uuid.New()
	_, err := pool.Exec(context.Background(), `
INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
    request_payload, job_status, failure_code, max_attempts,
    replay_source_job_record_id, replay_root_job_record_id, replay_generation_count)
VALUES ($1, 'etl_records', decode($3, 'hex'), decode($5, 'hex'), decode($7, 'hex'), NULL, 'FAILED', 'etl_target_failure', 3, $4, $4, 1),
       ($2, 'etl_records', decode($3, 'hex'), decode($6, 'hex'), decode($7, 'hex'), NULL, 'FAILED', 'etl_target_failure', 3, $1, $4, $8)`,
		first, last, scope, root, pgtest.SHA(uuid.NewString()), pgtest.SHA(uuid.NewString()), pgtest.SHA(payload), gen)
	if err != nil {
		t.Fatal(err)
	}
	return last
}

func TestReplayGenerationLimit(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	scope := repeatHex("a")
	const payload = `[{"id":"g"}]`
	at99 := chainEnd(t, pool, scope, payload, 99)
	out, err := replay(pool, scope, at99, "k99", payload)
	if err != nil || out.Job.Lineage.Generation != 100 {
		t.Fatalf("generation 100: %+v %v", out, err)
	}
	setTerminal(t, pool, out.Job.JobID, pg.StatusFailed)
	before := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`)
	if _, err := replay(pool, scope, out.Job.JobID, "k100", payload); !errors.Is(err, pg.ErrReplayGenerationExhausted) {
		t.Fatalf("beyond 100: %v", err)
	}
	if pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`) != before {
		t.Fatal("exhausted replay created a job")
	}
}

// Replays of different sources racing with one key: exactly one wins the
// unique key, every other one is ErrReplayKeyReused.
func TestReplayKeyRaceAcrossSources(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{MaxConns: 24})
	scope := repeatHex("a")
	const n = 12
	const payload = `[{"id":"x"}]`
	sources := make([]uuid.UUID, n)
	for i := range sources {
		sources[i] = pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: scope, Payload: payload, MaxAttempts: 4})[0]
		if _, err := pg.CancelJob(context.Background(), pool, pg.CancelParams{PrincipalScopeHash: scope,
			JobID: sources[i], CancellationKeyHash: repeatHex("c")}); err != nil {
			t.Fatal(err)
		}
	}
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = replay(pool, scope, sources[i], "shared-key", payload)
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, pg.ErrReplayKeyReused):
			t.Errorf("replay %d: %v", i, err)
		}
	}
	if won != 1 || pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE replay_source_job_record_id IS NOT NULL`) != 1 {
		t.Fatalf("%d winners", won)
	}
}

func pgCode(err error) string {
	code, _ := constraintOf(err)
	return code
}

// The guard: lineage is immutable, a referenced source's evidence is
// frozen, everything else stays writable.
func TestReplayLineageGuard(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	scope := repeatHex("a")
	const payload = `[{"id":"g"}]`
	source := failedJob(t, pool, scope, payload)
	out, err := replay(pool, scope, source, "guard-key", payload)
	if err != nil {
		t.Fatal(err)
	}
	replayID := out.Job.JobID
	plain := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: scope, Payload: payload, MaxAttempts: 4})[0]
	unreferenced := failedJob(t, pool, scope, payload)

	refused := []struct {
		name, sql string
		id        uuid.UUID
	}{
		{"generation of a replay", `UPDATE etl_job_records SET replay_generation_count = 2 WHERE job_record_id = $1`, replayID},
		{"root of a replay", `UPDATE etl_job_records SET replay_root_job_record_id = '` + unreferenced.String() + `' WHERE job_record_id = $1`, replayID},
		{"clear lineage", `UPDATE etl_job_records SET replay_source_job_record_id = NULL, replay_root_job_record_id = NULL,
			replay_generation_count = NULL WHERE job_record_id = $1`, replayID},
		{"add lineage", `UPDATE etl_job_records SET replay_source_job_record_id = '` + source.String() + `',
			replay_root_job_record_id = '` + source.String() + `', replay_generation_count = 1 WHERE job_record_id = $1`, plain},
		{"source failure code", `UPDATE etl_job_records SET failure_code = 'etl_internal_error' WHERE job_record_id = $1`, source},
		{"source status", `UPDATE etl_job_records SET job_status = 'PENDING', failure_code = NULL, request_payload = '[]' WHERE job_record_id = $1`, source},
		{"source attempts", `UPDATE etl_job_records SET attempt_count = 1 WHERE job_record_id = $1`, source},
		{"source digest", `UPDATE etl_job_records SET request_digest = decode(repeat('e', 64), 'hex') WHERE job_record_id = $1`, source},
		{"source updated_at", `UPDATE etl_job_records SET updated_at = updated_at - interval '1 day' WHERE job_record_id = $1`, source},
		{"source max attempts", `UPDATE etl_job_records SET max_attempts = 9 WHERE job_record_id = $1`, source},
	}
	for _, tc := range refused {
		_, err := pool.Exec(ctx, tc.sql, tc.id)
		if pgCode(err) != "23000" {
			t.Errorf("%s: %v, want SQLSTATE 23000", tc.name, err)
		}
	}
	allowed := []struct {
		name, sql string
		id        uuid.UUID
	}{
		{"source available_at", `UPDATE etl_job_records SET available_at = clock_timestamp() WHERE job_record_id = $1`, source},
		{"unreferenced terminal evidence", `UPDATE etl_job_records SET failure_code = 'etl_internal_error', updated_at = clock_timestamp() WHERE job_record_id = $1`, unreferenced},
		{"plain job", `UPDATE etl_job_records SET available_at = clock_timestamp(), updated_at = clock_timestamp() WHERE job_record_id = $1`, plain},
		{"replay job runs", `UPDATE etl_job_records SET available_at = clock_timestamp(), updated_at = clock_timestamp() WHERE job_record_id = $1`, replayID},
	}
	for _, tc := range allowed {
		if tag, err := pool.Exec(ctx, tc.sql, tc.id); err != nil || tag.RowsAffected() != 1 {
			t.Errorf("%s: %v %v", tc.name, err, tag)
		}
	}
	// A replay job that fails is frozen only once it is itself replayed.
	setTerminal(t, pool, replayID, pg.StatusFailed)
	if _, err := replay(pool, scope, replayID, "guard-key-2", payload); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE etl_job_records SET failure_code = 'etl_internal_error' WHERE job_record_id = $1`, replayID); pgCode(err) != "23000" {
		t.Errorf("replayed replay evidence: %v", err)
	}
	// Keys, not only the trigger: a referenced job cannot be deleted, a
	// replay cannot point at another owner's job, and lineage is all or nothing.
	if _, err := pool.Exec(ctx, `DELETE FROM etl_job_records WHERE job_record_id = $1`, source); pgCode(err) != "23503" {
		t.Errorf("delete referenced source: %v", err)
	}
	other := failedJob(t, pool, repeatHex("b"), payload)
	insert := `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
		request_payload, max_attempts, replay_source_job_record_id, replay_root_job_record_id, replay_generation_count)
		VALUES (gen_random_uuid(), 'etl_records', decode($1, 'hex'), decode($2, 'hex'), decode($3, 'hex'), '[]', 3, $4, $5, $6)`
	if _, err := pool.Exec(ctx, insert, scope, pgtest.SHA("x1"), pgtest.SHA("[]"), other, other, 1); pgCode(err) != "23503" {
		t.Errorf("foreign source: %v", err)
	}
	for _, gen := range []any{nil, 0, 101} {
		if _, err := pool.Exec(ctx, insert, scope, pgtest.SHA(fmt.Sprint("x", gen)), pgtest.SHA("[]"), source, source, gen); pgCode(err) != "23514" {
			t.Errorf("generation %v: %v", gen, err)
		}
	}
	if _, err := pool.Exec(ctx, insert, scope, pgtest.SHA("x2"), pgtest.SHA("[]"), replayID, replayID, 2); pgCode(err) != "23514" {
		t.Errorf("generation 2 rooted at its source: %v", err)
	}
}

// Migration 00003 refuses to roll back while lineage exists; without it,
// down and up work.
func TestMigration00003DownWithLineage(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	scope := repeatHex("a")
	const payload = `[{"id":"m"}]`
	source := failedJob(t, pool, scope, payload)
	out, err := replay(pool, scope, source, "mig-key", payload)
	if err != nil {
		t.Fatal(err)
	}
	err = pg.MigrateTo(ctx, pool, 2)
	if pgCode(err) != "55006" || !strings.Contains(err.Error(), "replay jobs exist") {
		t.Fatalf("down with lineage: %v", err)
	}
	if applied, _, err := pg.SchemaVersion(ctx, pool); err != nil || applied != 3 {
		t.Fatalf("version after refused down: %d %v", applied, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM etl_job_records WHERE job_record_id = $1`, out.Job.JobID); err != nil {
		t.Fatal(err)
	}
	if err := pg.MigrateTo(ctx, pool, 2); err != nil {
		t.Fatalf("down without lineage: %v", err)
	}
	if err := pg.Migrate(ctx, pool); err != nil {
		t.Fatalf("up again: %v", err)
	}
	// Statements prepared before the column types changed cannot be reused.
	pool.Reset()
	// The schema works again end to end.
	if _, err := replay(pool, scope, source, "mig-key", payload); err != nil {
		t.Fatalf("replay after re-up: %v", err)
	}
}

// An UPDATE of a source that waits on a replay's source lock is judged by
// the guard after the replay commits, so it sees the new reference.
func TestReplayGuardSeesConcurrentReplay(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	scope := repeatHex("a")
	const payload = `[{"id":"race"}]`
	source := failedJob(t, pool, scope, payload)

	// The replay transaction, held open after its lock and insert.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// A lock that matched no row would leave nothing to wait on.
	if tag, err := tx.Exec(ctx, `SELECT 1 FROM etl_job_records WHERE job_record_id = $1 AND principal_scope_hash = decode($2, 'hex') FOR UPDATE`, source, scope); err != nil {
		t.Fatal(err)
	} else if tag.RowsAffected() != 1 {
		t.Fatalf("source lock took %d rows, want 1", tag.RowsAffected())
	}
	if _, err := pg.InsertJobs(ctx, tx, []pg.NewJob{{Kind: pg.KindETLRecords, PrincipalScopeHash: scope,
		SubmissionKeyHash: pgtest.SHA("race-key"), RequestDigest: pgtest.SHA(payload), Payload: payload, MaxAttempts: 3,
		Lineage: &pg.Lineage{SourceJobID: source, RootJobID: source, Generation: 1}}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, `UPDATE etl_job_records SET failure_code = 'etl_internal_error' WHERE job_record_id = $1`, source)
		done <- err
	}()
	testwait.For(t, 30*time.Second, "the UPDATE waits on the source lock", func() bool {
		return pgtest.Count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`) > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; pgCode(err) != "23000" {
		t.Fatalf("update racing a replay: %v, want 23000", err)
	}
}
