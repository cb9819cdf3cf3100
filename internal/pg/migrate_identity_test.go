package pg_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// migSubmissionIndex describes etl_job_submission_key_unique: whether it
// backs a constraint, whether it is unique, and its definition.
func migSubmissionIndex(t *testing.T, pool *pgxpool.Pool) (constraint, unique bool, def string) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `
		SELECT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = 'etl_job_submission_key_unique'
		                 AND c.conrelid = 'etl_job_records'::regclass AND c.contype = 'u'),
		       i.indisunique, pg_get_indexdef(i.indexrelid)
		FROM pg_index i WHERE i.indexrelid = 'etl_job_submission_key_unique'::regclass`).Scan(&constraint, &unique, &def)
	if err != nil {
		t.Fatalf("read etl_job_submission_key_unique: %v", err)
	}
	return constraint, unique, def
}

// migSeedKeys inserts n SUCCEEDED jobs of one owner, with distinct keys
// sha256('mig-15-<i>'), by SQL.
func migSeedKeys(t *testing.T, pool *pgxpool.Pool, owner string, n int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
		    request_payload, job_status, attempt_count, max_attempts)
		SELECT gen_random_uuid(), 'etl_records', decode($1, 'hex'), sha256(convert_to('mig-15-' || g, 'UTF8')),
		       sha256(convert_to('body', 'UTF8')), NULL, 'SUCCEEDED', 1, 3
		FROM generate_series(1, $2) g`, owner, n); err != nil {
		t.Fatalf("seed jobs: %v", err)
	}
}

// Migration 00015 replaces the two-digest unique constraint on
// (principal_scope_hash, submission_key_hash) with a unique index of the
// same name on a 16-byte identity of the pair. Pinned here: existing rows
// keep their uniqueness (a taken pair is refused under the same name,
// another owner may use the same key), the index is a fraction of the
// constraint's size, the product's idempotent insert and its lookups use
// it (by plan, and by behaviour: a resubmission returns the existing job,
// a replay key makes one job, the operator replay function converges), and
// down restores the constraint and the function's former body.
func TestMigration00015CompactsTheSubmissionIndexAndDownReverts(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	migTo(t, pool, 14)
	owner, other := pgtest.SHA("mig-15-owner"), pgtest.SHA("mig-15-other")
	const n = 20000
	migSeedKeys(t, pool, owner, n)
	constraint, unique, _ := migSubmissionIndex(t, pool)
	if !constraint || !unique {
		t.Fatalf("at 00014 etl_job_submission_key_unique: constraint %v, unique %v; want a unique constraint", constraint, unique)
	}
	var before int64
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size('etl_job_submission_key_unique')`).Scan(&before); err != nil {
		t.Fatal(err)
	}

	migTo(t, pool, 15)
	constraint, unique, def := migSubmissionIndex(t, pool)
	if constraint || !unique || !strings.Contains(def, "sha256") || !strings.Contains(def, "::uuid") {
		t.Fatalf("at 00015 etl_job_submission_key_unique: constraint %v, unique %v, %s; want a unique index on the uuid identity", constraint, unique, def)
	}
	var after int64
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size('etl_job_submission_key_unique')`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	// 24-byte entries against 80: built fresh, the index holds n entries in
	// well under half the pages of the constraint's index.
	if after*2 > before {
		t.Errorf("index size at 00015 %d bytes, at 00014 %d: want less than half", after, before)
	}

	// Existing pairs stay unique under the same name; the key is the
	// owner's own, so another owner may use it.
	dup := `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
		request_payload, job_status, attempt_count, max_attempts)
		VALUES (gen_random_uuid(), 'etl_records', decode($1, 'hex'), sha256(convert_to('mig-15-7', 'UTF8')),
		        sha256(convert_to('body', 'UTF8')), NULL, 'SUCCEEDED', 1, 3)`
	_, err := pool.Exec(ctx, dup, owner)
	if code, name := constraintOf(err); code != "23505" || name != "etl_job_submission_key_unique" {
		t.Fatalf("a taken pair at 00015: %v, want 23505 etl_job_submission_key_unique", err)
	}
	if _, err := pool.Exec(ctx, dup, other); err != nil {
		t.Fatalf("the same key for another owner at 00015: %v", err)
	}

	// The lookups of the product use the index, and read only the pairs
	// asked for.
	if _, err := pool.Exec(ctx, `ANALYZE etl_job_records`); err != nil {
		t.Fatal(err)
	}
	key := pgtest.SHA("mig-15-7")
	keyBytes, _ := pg.DecodeDigest(make([]byte, 32), key)
	ownerBytes, _ := pg.DecodeDigest(make([]byte, 32), owner)
	otherBytes, _ := pg.DecodeDigest(make([]byte, 32), other)
	for _, q := range []struct {
		name string
		sql  string
		args []any
		rows float64
	}{
		{"existing jobs", pg.ExistingJobsSQL, []any{[][]byte{ownerBytes, otherBytes}, [][]byte{keyBytes, keyBytes}}, 2},
		{"replay by key", pg.ReplayByKeySQL, []any{owner, key}, 1},
	} {
		// Their FROM and WHERE, which decide the plan, projected to a column
		// of schema 15 (today's select lists read 00025's job_priority).
		from := strings.Index(q.sql, "FROM etl_job_records j")
		if from < 0 {
			t.Fatalf("%s: no FROM etl_job_records j in %s", q.name, q.sql)
		}
		nodes, maxRows := explain(t, pool, "SELECT j.job_record_id "+q.sql[from:], q.args...)
		if len(nodes) != 1 || nodes[0] != "Index Scan etl_job_submission_key_unique" || maxRows != q.rows {
			t.Errorf("%s: plan on etl_job_records %v reading at most %v rows; want one index scan of etl_job_submission_key_unique reading %v",
				q.name, nodes, maxRows, q.rows)
		}
	}

	// The idempotent insert: a resubmission of a taken pair returns its
	// job (the plain INSERT meets the index, the ON CONFLICT statement
	// names it as arbiter), a new pair is created.
	var existing uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT job_record_id FROM etl_job_records
		WHERE principal_scope_hash = decode($1, 'hex') AND submission_key_hash = decode($2, 'hex')`, owner, key).Scan(&existing); err != nil {
		t.Fatal(err)
	}
	// (The insert of schema 15's binaries: today's pg.InsertJobs writes
	// 00025's columns. Its ON CONFLICT names the same index expression.)
	digest := pgtest.SHA("body")
	var created []uuid.UUID
	rows, err := pool.Query(ctx, `INSERT INTO etl_job_records AS j (job_record_id, job_kind, principal_scope_hash,
	        submission_key_hash, request_digest, request_payload, max_attempts)
	    SELECT gen_random_uuid(), 'etl_records', decode($1, 'hex'), decode(k, 'hex'), decode($2, 'hex'), 'body', 3
	    FROM unnest($3::text[]) AS k
	    ON CONFLICT ((encode(substr(sha256(principal_scope_hash || submission_key_hash), 1, 16), 'hex')::uuid)) DO NOTHING
	    RETURNING j.job_record_id`, owner, digest, []string{key, pgtest.SHA("mig-15-new")})
	if err == nil {
		created, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	}
	if err != nil || len(created) != 1 || created[0] == existing {
		t.Fatalf("insert of a taken and a new pair at 00015: created %v, %v; want only the new pair", created, err)
	}

	// The operator replay function (rewritten by 00015) makes one job per
	// key and owner, and refuses the key for another source.
	failedA, failedB := uuid.New(), uuid.New()
	for _, id := range []uuid.UUID{failedA, failedB} {
		if _, err := pool.Exec(ctx, `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
			request_digest, request_payload, job_status, attempt_count, max_attempts, failure_code)
			VALUES ($1, 'etl_records', decode($2, 'hex'), decode($3, 'hex'), decode($4, 'hex'), NULL, 'FAILED', 1, 3, 'etl_target_failure')`,
			id, owner, pgtest.SHA("mig-15-source-"+id.String()), digest); err != nil {
			t.Fatal(err)
		}
	}
	opReplay := pg.OperatorReplayParams{SourceJobID: failedA, OperatorScopeHash: pgtest.SHA("mig-15-operator"),
		ReplayKeyHash: pgtest.SHA("mig-15-operator-key"), RequestDigest: digest, Payload: "body"}
	// By the function of version 15 (migOperatorReplay): the product's
	// OperatorReplayJob also writes the audit of 00020.
	outcome, createdID, err := migOperatorReplay(t, pool, opReplay)
	if err != nil || outcome != "created" {
		t.Fatalf("operator replay at 00015: %s, %v", outcome, err)
	}
	if outcome, again, err := migOperatorReplay(t, pool, opReplay); err != nil || outcome != "replayed" || again != createdID {
		t.Fatalf("repeated operator replay at 00015: %s %s, %v; want replayed %s", outcome, again, err, createdID)
	}
	opReplay.SourceJobID = failedB
	if outcome, _, err := migOperatorReplay(t, pool, opReplay); err != nil || outcome != "key_reused" {
		t.Fatalf("operator replay of another source with the key at 00015: %s, %v, want key_reused", outcome, err)
	}

	// Down: the two-digest constraint is back, and the former function body
	// still finds the replay made at 00015.
	migTo(t, pool, 14)
	constraint, unique, def = migSubmissionIndex(t, pool)
	if !constraint || !unique || strings.Contains(def, "sha256") {
		t.Fatalf("after down etl_job_submission_key_unique: constraint %v, unique %v, %s; want the two-column constraint", constraint, unique, def)
	}
	_, err = pool.Exec(ctx, dup, owner)
	if code, name := constraintOf(err); code != "23505" || name != "etl_job_submission_key_unique" {
		t.Fatalf("a taken pair after down: %v, want 23505 etl_job_submission_key_unique", err)
	}
	var job uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT outcome, job_record_id FROM etl_operator_replay_job($1, $2, $3, $4, $5, $6)`,
		failedA, opReplay.OperatorScopeHash, opReplay.ReplayKeyHash, digest, "body", uuid.New()).Scan(&outcome, &job); err != nil ||
		outcome != "replayed" || job != createdID {
		t.Fatalf("operator replay after down: %s %s, %v; want replayed %s", outcome, job, err, createdID)
	}
	var fnBody string
	if err := pool.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'etl_operator_replay_job'`).Scan(&fnBody); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fnBody, "sha256") {
		t.Error("etl_operator_replay_job after down still names the 00015 identity")
	}
	migUp(t, pool)
}

// Migration 00016 rebuilds the owner pagination index in ascending order and
// down rebuilds it descending; owners' lists read the same rows either way.
func TestMigration00016OrdersThePaginationIndexAscendingAndDownReverts(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	def := func() string {
		t.Helper()
		var d string
		if err := pool.QueryRow(ctx, `SELECT pg_get_indexdef('etl_job_owner_pagination_index'::regclass)`).Scan(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	migTo(t, pool, 15)
	owner := pgtest.SHA("mig-16-owner")
	migSeedKeys(t, pool, owner, 30)
	if d := def(); !strings.Contains(d, "created_at DESC, job_record_id DESC") {
		t.Fatalf("at 00015: %s, want the descending index", d)
	}
	list := func(at string) []uuid.UUID {
		t.Helper()
		// The list of schema 15/16's binaries (pg.ListJobs reads 00025's
		// job_priority today): the same keyset order.
		rows, err := pool.Query(ctx, `SELECT j.job_record_id FROM etl_job_records j
			WHERE j.principal_scope_hash = decode($1, 'hex')
			ORDER BY j.created_at DESC, j.job_record_id DESC LIMIT 100`, owner)
		if err != nil {
			t.Fatalf("list at %s: %v", at, err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil || len(ids) != 30 {
			t.Fatalf("list at %s: %d jobs, %v", at, len(ids), err)
		}
		return ids
	}
	before := list("00015")
	migTo(t, pool, 16)
	if d := def(); strings.Contains(d, "DESC") || !strings.Contains(d, "(principal_scope_hash, created_at, job_record_id)") {
		t.Fatalf("at 00016: %s, want (principal_scope_hash, created_at, job_record_id)", d)
	}
	if after := list("00016"); !slices.Equal(before, after) {
		t.Fatalf("list order changed at 00016: %v, was %v", after, before)
	}
	migTo(t, pool, 15)
	if d := def(); !strings.Contains(d, "created_at DESC, job_record_id DESC") {
		t.Fatalf("after down: %s, want the descending index", d)
	}
	migUp(t, pool)
}
