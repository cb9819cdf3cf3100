package pg_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

func operatorReplay(pool *pgxpool.Pool, source uuid.UUID, operator, key, payload string) (pg.ReplayOutcome, error) {
	return pg.OperatorReplayJob(context.Background(), pool, pg.OperatorReplayParams{SourceJobID: source,
		OperatorScopeHash: operator, ReplayKeyHash: pgtest.SHA("operator-replay:" + key), RequestDigest: pgtest.SHA(payload),
		Payload: payload})
}

// An operator's replay of another owner's FAILED or CANCELLED job creates
// the owner's new PENDING job with lineage, its claim-queue row and its
// job_available outbox row carrying the operator's hash; the same key and
// body return that job; every refusal writes nothing.
func TestOperatorReplayJobOutcomes(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner, operator := repeatHex("a"), repeatHex("e")
	const payload = `[{"id":"op1","name":"jane"}]`
	failed := failedJob(t, pool, owner, payload)

	out, err := operatorReplay(pool, failed, operator, "k1", payload)
	if err != nil || !out.Created || out.Job.Status != pg.StatusPending || out.Job.Lineage == nil ||
		*out.Job.Lineage != (pg.Lineage{SourceJobID: failed, RootJobID: failed, Generation: 1}) ||
		out.Job.RequestDigest != pgtest.SHA(payload) {
		t.Fatalf("operator replay: %+v %v", out, err)
	}
	id := out.Job.JobID
	var scope, keyHash, stored, kind string
	var maxAttempts int
	if err := pool.QueryRow(ctx, `SELECT encode(principal_scope_hash, 'hex'), encode(submission_key_hash, 'hex'), request_payload, job_kind, max_attempts
		FROM etl_job_records WHERE job_record_id = $1`, id).Scan(&scope, &keyHash, &stored, &kind, &maxAttempts); err != nil {
		t.Fatal(err)
	}
	if scope != owner || keyHash != pgtest.SHA("operator-replay:k1") || stored != payload || kind != pg.KindETLRecords || maxAttempts != 4 {
		t.Errorf("replay row: owner %v key %v payload %q kind %s max %d", scope == owner, keyHash == pgtest.SHA("operator-replay:k1"),
			stored, kind, maxAttempts)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_claim_queue WHERE job_record_id = $1`, id); n != 1 {
		t.Errorf("claim-queue rows %d, want 1", n)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events WHERE event_kind = 'job_available'
		AND job_status = 'PENDING' AND job_record_ids = ARRAY[$1::uuid] AND attempt_counts = ARRAY[0]
		AND actor_principal_scope_hash = $2`, id, operator); n != 1 {
		t.Errorf("job_available rows with the operator's hash %d, want 1", n)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events WHERE actor_principal_scope_hash IS NOT NULL`); n != 1 {
		t.Errorf("outbox rows with an actor %d, want 1", n)
	}
	// The owner sees the job as theirs.
	if got, err := pg.GetJob(ctx, pool, owner, id); err != nil || got.Lineage == nil {
		t.Errorf("owner's view: %+v %v", got, err)
	}

	// The same key and body: the same job, whatever the source's state.
	again, err := operatorReplay(pool, failed, operator, "k1", payload)
	if err != nil || again.Created || again.Job.JobID != id {
		t.Fatalf("repeat: %+v %v", again, err)
	}

	cancelled := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: owner, Payload: payload})[0]
	if _, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: owner, JobID: cancelled,
		CancellationKeyHash: pgtest.SHA("c")}); err != nil {
		t.Fatal(err)
	}
	pending := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: owner, Payload: payload})[0]
	succeeded := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: owner, Payload: payload})[0]
	setTerminal(t, pool, succeeded, pg.StatusSucceeded)
	before, outbox := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`), pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events`)
	for name, c := range map[string]struct {
		source       uuid.UUID
		key, payload string
		want         error
	}{
		"absent":                 {uuid.New(), "k2", payload, pg.ErrNotFound},
		"other body, same key":   {failed, "k1", `[{"id":"other"}]`, pg.ErrReplayKeyReused},
		"other source, same key": {cancelled, "k1", payload, pg.ErrReplayKeyReused},
		"wrong body":             {cancelled, "k3", payload + " ", pg.ErrReplayPayloadMismatch},
		"pending":                {pending, "k4", payload, pg.ErrReplaySourceActive},
		"succeeded":              {succeeded, "k5", payload, pg.ErrReplaySourceSucceeded},
	} {
		if out, err := operatorReplay(pool, c.source, operator, c.key, c.payload); !errors.Is(err, c.want) {
			t.Errorf("%s: %+v %v, want %v", name, out, err, c.want)
		}
	}
	if pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`) != before || pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events`) != outbox {
		t.Fatal("a refused operator replay wrote a row")
	}

	// A CANCELLED source; then a replay of the replay is generation 2.
	c, err := operatorReplay(pool, cancelled, operator, "k6", payload)
	if err != nil || !c.Created || c.Job.Lineage.RootJobID != cancelled {
		t.Fatalf("replay of a cancelled job: %+v %v", c, err)
	}
	setTerminal(t, pool, id, pg.StatusFailed)
	second, err := operatorReplay(pool, id, operator, "k7", payload)
	if err != nil || *second.Job.Lineage != (pg.Lineage{SourceJobID: id, RootJobID: failed, Generation: 2}) {
		t.Fatalf("second generation: %+v %v", second, err)
	}
}

func TestOperatorReplayGenerationLimit(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	owner, operator := repeatHex("a"), repeatHex("e")
	const payload = `[{"id":"g"}]`
	at99 := chainEnd(t, pool, owner, payload, 99)
	out, err := operatorReplay(pool, at99, operator, "k99", payload)
	if err != nil || out.Job.Lineage.Generation != 100 {
		t.Fatalf("generation 100: %+v %v", out, err)
	}
	setTerminal(t, pool, out.Job.JobID, pg.StatusFailed)
	before := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`)
	if _, err := operatorReplay(pool, out.Job.JobID, operator, "k100", payload); !errors.Is(err, pg.ErrReplayGenerationExhausted) {
		t.Fatalf("beyond 100: %v", err)
	}
	if pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`) != before {
		t.Fatal("exhausted replay created a job")
	}
}

// Concurrent operator replays of one source with one key converge on one
// job (the source lock serialises them): exactly one creates it.
func TestOperatorReplayConcurrentSameKey(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	const payload = `[{"id":"race"}]`
	source := failedJob(t, pool, repeatHex("a"), payload)
	const n = 8
	outs, errs := make([]pg.ReplayOutcome, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i], errs[i] = operatorReplay(pool, source, repeatHex("e"), "race-key", payload) })
	}
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] != nil || outs[i].Job.JobID != outs[0].Job.JobID {
			t.Fatalf("replay %d: %+v %v", i, outs[i], errs[i])
		}
		if outs[i].Created {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d calls created the job, want 1", created)
	}
}
