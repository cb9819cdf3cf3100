package pg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// storedDigest is job id's request_digest (hex): a plain replay sending it
// passes the digest rule, so only the kind rule can refuse it.
func storedDigest(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) string {
	t.Helper()
	var d string
	if err := pool.QueryRow(context.Background(), `SELECT encode(request_digest, 'hex') FROM etl_job_records WHERE job_record_id = $1`,
		id).Scan(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// rowCounts counts the rows a replay would write: jobs, claim-queue rows,
// outbox rows.
func rowCounts(t *testing.T, pool *pgxpool.Pool) [3]int {
	t.Helper()
	return [3]int{
		pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`),
		pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_claim_queue`),
		pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events`),
	}
}

// A large (etl_chunked) job is never replayed through the plain owner
// replay: FAILED, CANCELLED (and PENDING) sources are ErrReplayRequiresUpload
// with nothing written, after the not-found and key rules.
func TestReplayJobRefusesChunkedSource(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner, other := repeatHex("a"), repeatHex("b")

	failed := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Owner: owner, Status: pg.StatusFailed})
	cancelled := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Owner: owner})
	if out, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: owner, JobID: cancelled,
		CancellationKeyHash: pgtest.SHA("cancel")}); err != nil || !out.Cancelled || out.Job.Status != pg.StatusCancelled {
		t.Fatalf("cancel chunked job: %+v %v", out, err)
	}
	pending := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Owner: owner})
	// A job holding key "held" for the owner: the key rule comes first.
	normal := failedJob(t, pool, owner, `[{"id":"n1"}]`)
	if _, err := replay(pool, owner, normal, "held", `[{"id":"n1"}]`); err != nil {
		t.Fatal(err)
	}
	before := rowCounts(t, pool)

	for name, tc := range map[string]struct {
		scope, key string
		source     uuid.UUID
		want       error
	}{
		"failed":    {owner, "k-failed", failed, pg.ErrReplayRequiresUpload},
		"cancelled": {owner, "k-cancelled", cancelled, pg.ErrReplayRequiresUpload},
		"pending":   {owner, "k-pending", pending, pg.ErrReplayRequiresUpload},
		"foreign":   {other, "k-foreign", failed, pg.ErrNotFound},
		"key held":  {owner, "held", failed, pg.ErrReplayKeyReused},
	} {
		out, err := pg.ReplayJob(ctx, pool, pg.ReplayParams{PrincipalScopeHash: tc.scope, SourceJobID: tc.source,
			ReplayKeyHash: pgtest.SHA("replay:" + tc.key), RequestDigest: storedDigest(t, pool, tc.source),
			Payload: `{"id":"raw body"}`})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %+v %v, want %v", name, out, err, tc.want)
		}
	}
	if after := rowCounts(t, pool); after != before {
		t.Fatalf("refused replays wrote rows: jobs/queue/outbox %v -> %v", before, after)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_kind = $1 AND replay_source_job_record_id IS NOT NULL`,
		pg.KindETLChunked); n != 0 {
		t.Errorf("chunked replay jobs %d, want 0", n)
	}
}

// The operator replay refuses a large source with ErrReplayRequiresUpload,
// writes nothing but the refusal's audit row (as the function audits its
// own refusals), and keeps the key rule first.
func TestOperatorReplayRefusesChunkedSource(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner, operator := repeatHex("a"), repeatHex("e")

	failed := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Owner: owner, Status: pg.StatusFailed})
	cancelled := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Owner: owner})
	if _, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: owner, JobID: cancelled,
		CancellationKeyHash: pgtest.SHA("cancel")}); err != nil {
		t.Fatal(err)
	}
	// An operator key already used for a normal job of the owner.
	const payload = `[{"id":"n1"}]`
	normal := failedJob(t, pool, owner, payload)
	if _, err := operatorReplay(pool, normal, operator, "held", payload); err != nil {
		t.Fatal(err)
	}
	before := rowCounts(t, pool)
	audits := pgtest.Count(t, pool, `SELECT count(*) FROM etl_operator_audit_records`)

	for name, tc := range map[string]struct {
		key    string
		source uuid.UUID
		want   error
	}{
		"failed":    {"k-failed", failed, pg.ErrReplayRequiresUpload},
		"cancelled": {"k-cancelled", cancelled, pg.ErrReplayRequiresUpload},
		"key held":  {"held", failed, pg.ErrReplayKeyReused},
	} {
		out, err := pg.OperatorReplayJob(ctx, pool, pg.OperatorReplayParams{SourceJobID: tc.source,
			OperatorScopeHash: operator, ReplayKeyHash: pgtest.SHA("operator-replay:" + tc.key),
			RequestDigest: storedDigest(t, pool, tc.source), Payload: `{"id":"raw body"}`})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %+v %v, want %v", name, out, err, tc.want)
		}
	}
	if after := rowCounts(t, pool); after != before {
		t.Fatalf("refused operator replays wrote rows: jobs/queue/outbox %v -> %v", before, after)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_operator_audit_records`); n != audits+3 {
		t.Errorf("audit rows %d, want %d", n, audits+3)
	}
	for _, src := range []uuid.UUID{failed, cancelled} {
		if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_operator_audit_records
			WHERE operator_action = 'replay' AND job_record_id = $1 AND replay_job_record_id IS NULL
			  AND outcome_code = $2 AND operator_principal_scope_hash = decode($3, 'hex')`,
			src, codes.ReplayRequiresUpload, operator); n != 1 {
			t.Errorf("refusal audit rows of %s: %d, want 1", src, n)
		}
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_operator_audit_records
		WHERE job_record_id = $1 AND outcome_code = $2`, failed, codes.ReplayKeyReused); n != 1 {
		t.Errorf("key-reused audit rows %d, want 1", n)
	}
}
