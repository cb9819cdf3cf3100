package pg_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// migDigestRow is the hex text of one job row's identity digests and
// cancellation key hash ("" for NULL).
type migDigestRow struct {
	owner, key, digest, cancelKey string
}

// migDigestColumnTypes returns the declared type of each identity digest
// column of etl_job_records and of cancellation_key_hash.
func migDigestColumnTypes(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a WHERE a.attrelid = 'etl_job_records'::regclass AND NOT a.attisdropped
		  AND a.attname IN ('principal_scope_hash', 'submission_key_hash', 'request_digest', 'cancellation_key_hash')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var col, typ string
		if err := rows.Scan(&col, &typ); err != nil {
			t.Fatal(err)
		}
		out[col] = typ
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// migTypeExists reports whether a type (here: a domain) of that name exists.
func migTypeExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT to_regtype($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// migTo migrates pool to version v and drops its connections: statements
// prepared before a column changed type cannot be reused.
func migTo(t *testing.T, pool *pgxpool.Pool, v int64) {
	t.Helper()
	if err := pg.MigrateTo(context.Background(), pool, v); err != nil {
		t.Fatalf("migrate to %d: %v", v, err)
	}
	pool.Reset()
}

// Migration 00014 turns principal_scope_hash, submission_key_hash and
// request_digest of etl_job_records from 64-character hex text into their 32
// bytes (domain etl_sha256_digest), row by row; the product statements and
// the SQL functions, which still speak hex, find the converted rows; down
// gives every row back the exact hex text, with the text domains, their
// format checks and the functions' former bodies, and up converts again.
func TestMigration00014ConvertsDigestsAndDownReverts(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	migTo(t, pool, 13)
	textTypes := migDigestColumnTypes(t, pool)

	// Rows of version 13, by SQL, with known hex: a FAILED source, its
	// PENDING replay (lineage), an owner's CANCELLED job and another owner's
	// PENDING job. The values include leading zero bytes and 0xff bytes.
	const payload = `[{"id":"m14"}]`
	owner, other := pgtest.SHA("mig-14-owner"), pgtest.SHA("mig-14-other")
	digest := pgtest.SHA(payload)
	source, replayJob, cancelled, pending := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	want := map[uuid.UUID]migDigestRow{
		source:    {owner, strings.Repeat("0", 62) + "01", digest, ""},
		replayJob: {owner, pgtest.SHA("mig-14-replay-key"), digest, ""},
		cancelled: {owner, pgtest.SHA("mig-14-cancelled"), strings.Repeat("f", 64), pgtest.SHA("mig-14-cancel-key")},
		pending:   {other, pgtest.SHA("mig-14-other-key"), digest, ""},
	}
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
			request_payload, job_status, attempt_count, max_attempts, failure_code)
			VALUES ($1, 'etl_records', $2, $3, $4, NULL, 'FAILED', 1, 3, 'etl_target_failure')`,
			[]any{source, want[source].owner, want[source].key, want[source].digest}},
		{`WITH j AS (INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
			request_digest, request_payload, max_attempts,
			replay_source_job_record_id, replay_root_job_record_id, replay_generation_count)
			VALUES ($1, 'etl_records', $2, $3, $4, $5, 3, $6, $6, 1) RETURNING job_record_id, available_at)
			INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) SELECT job_record_id, available_at FROM j`,
			[]any{replayJob, want[replayJob].owner, want[replayJob].key, want[replayJob].digest, payload, source}},
		{`INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
			request_payload, job_status, max_attempts, cancellation_key_hash, cancellation_code, job_cancelled_at)
			VALUES ($1, 'etl_records', $2, $3, $4, NULL, 'CANCELLED', 3, $5, 'etl_job_cancelled_by_owner', clock_timestamp())`,
			[]any{cancelled, want[cancelled].owner, want[cancelled].key, want[cancelled].digest, want[cancelled].cancelKey}},
		{`WITH j AS (INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
			request_digest, request_payload, max_attempts)
			VALUES ($1, 'etl_records', $2, $3, $4, $5, 3) RETURNING job_record_id, available_at)
			INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) SELECT job_record_id, available_at FROM j`,
			[]any{pending, want[pending].owner, want[pending].key, want[pending].digest, payload}},
	} {
		if _, err := pool.Exec(ctx, stmt.sql, stmt.args...); err != nil {
			t.Fatalf("insert at 00013: %v", err)
		}
	}

	// Up: the three columns hold the decoded 32 bytes; the cancellation key
	// hash is untouched text.
	migTo(t, pool, 14)
	types := migDigestColumnTypes(t, pool)
	for _, col := range []string{"principal_scope_hash", "submission_key_hash", "request_digest"} {
		if types[col] != "etl_sha256_digest" {
			t.Errorf("%s is %s at 00014, want etl_sha256_digest", col, types[col])
		}
	}
	if types["cancellation_key_hash"] != textTypes["cancellation_key_hash"] {
		t.Errorf("cancellation_key_hash is %s at 00014, was %s", types["cancellation_key_hash"], textTypes["cancellation_key_hash"])
	}
	// The text domains stay (unused) at 00014: dropping them needs their
	// owner, which in a deployment set up by least-privilege.sql before 00014
	// is not the migrator (see the migration's header); down uses them again.
	for _, d := range []string{"etl_job_principal_scope_hash", "etl_job_submission_key_hash", "etl_job_request_digest"} {
		if !migTypeExists(t, pool, d) {
			t.Errorf("domain %s dropped at 00014", d)
		}
	}
	rows, err := pool.Query(ctx, `SELECT job_record_id, principal_scope_hash, submission_key_hash, request_digest,
		coalesce(cancellation_key_hash, ''), octet_length(principal_scope_hash), octet_length(submission_key_hash),
		octet_length(request_digest) FROM etl_job_records`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var id uuid.UUID
		var scope, key, dig []byte
		var cancelKey string
		var lens [3]int
		if err := rows.Scan(&id, &scope, &key, &dig, &cancelKey, &lens[0], &lens[1], &lens[2]); err != nil {
			t.Fatal(err)
		}
		w, ok := want[id]
		if !ok {
			t.Fatalf("unexpected row %s at 00014", id)
		}
		seen++
		for _, c := range []struct {
			name      string
			got       []byte
			wantHex   string
			octetSize int
		}{{"principal_scope_hash", scope, w.owner, lens[0]}, {"submission_key_hash", key, w.key, lens[1]}, {"request_digest", dig, w.digest, lens[2]}} {
			wantBytes, err := hex.DecodeString(c.wantHex)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(c.got, wantBytes) || c.octetSize != 32 {
				t.Errorf("row %s %s = %x (octet_length %d), want decode(%s, 'hex') of 32 bytes", id, c.name, c.got, c.octetSize, c.wantHex)
			}
		}
		if cancelKey != w.cancelKey {
			t.Errorf("row %s cancellation_key_hash = %q, want %q", id, cancelKey, w.cancelKey)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(want) {
		t.Fatalf("%d rows at 00014, want %d", seen, len(want))
	}

	// The product statements and the SQL functions, given hex, find the
	// converted rows (at the latest version: the product's statements name
	// 00015's submission-key index as their ON CONFLICT arbiter).
	migUp(t, pool)
	pool.Reset()
	if j, err := pg.GetJob(ctx, pool, owner, source); err != nil || j.Status != pg.StatusFailed || j.RequestDigest != digest {
		t.Fatalf("GetJob of the source at 00014: %+v, %v", j, err)
	}
	if list, err := pg.ListJobs(ctx, pool, pg.ListParams{PrincipalScopeHash: owner, Limit: 10}); err != nil || len(list) != 3 {
		t.Fatalf("ListJobs of the owner at 00014: %d jobs, %v; want 3", len(list), err)
	}
	ins, err := pg.InsertJobs(ctx, pool, []pg.NewJob{{Kind: pg.KindETLRecords, PrincipalScopeHash: other,
		SubmissionKeyHash: want[pending].key, RequestDigest: digest, Payload: payload, MaxAttempts: 3}})
	if err != nil || ins[0].Created || ins[0].JobID != pending || ins[0].RequestDigest != digest {
		t.Fatalf("resubmission of a converted job: %+v, %v", ins, err)
	}
	rep, err := pg.ReplayJob(ctx, pool, pg.ReplayParams{PrincipalScopeHash: owner, SourceJobID: source,
		ReplayKeyHash: want[replayJob].key, RequestDigest: digest, Payload: payload})
	if err != nil || rep.Created || rep.Job.JobID != replayJob || rep.Job.Lineage == nil || rep.Job.Lineage.SourceJobID != source {
		t.Fatalf("repeated replay of a converted lineage: %+v, %v", rep, err)
	}
	var activeOwner string
	if err := pool.QueryRow(ctx, `SELECT principal_scope_hash FROM etl_ops_active_jobs(10) WHERE job_record_id = $1`, pending).
		Scan(&activeOwner); err != nil || activeOwner != other {
		t.Fatalf("etl_ops_active_jobs owner at 00014: %q, %v, want %s", activeOwner, err, other)
	}
	replayCancelKey := pgtest.SHA("mig-14-cancel-2")
	if out, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: owner, JobID: replayJob,
		CancellationKeyHash: replayCancelKey}); err != nil || !out.Cancelled || out.Job.RequestDigest != digest {
		t.Fatalf("cancel of a converted job at 00014: %+v, %v", out, err)
	}
	if out, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: owner, JobID: cancelled,
		CancellationKeyHash: pgtest.SHA("other")}); err != nil || out.Cancelled || out.StoredKeyHash != want[cancelled].cancelKey {
		t.Fatalf("repeated cancel of a job cancelled at 00013: %+v, %v", out, err)
	}
	opReplay := pg.OperatorReplayParams{SourceJobID: source, OperatorScopeHash: pgtest.SHA("mig-14-operator"),
		ReplayKeyHash: pgtest.SHA("mig-14-operator-key"), RequestDigest: digest, Payload: payload}
	created, err := pg.OperatorReplayJob(ctx, pool, opReplay)
	if err != nil || !created.Created || created.Job.RequestDigest != digest || created.Job.Lineage == nil ||
		*created.Job.Lineage != (pg.Lineage{SourceJobID: source, RootJobID: source, Generation: 1}) {
		t.Fatalf("operator replay of a converted source: %+v, %v", created, err)
	}
	want[replayJob] = migDigestRow{owner, want[replayJob].key, digest, replayCancelKey}
	want[created.Job.JobID] = migDigestRow{owner, opReplay.ReplayKeyHash, digest, ""}
	// The owner guard, created again by 00014, still refuses a new owner.
	_, err = pool.Exec(ctx, `UPDATE etl_job_records SET principal_scope_hash = decode($1, 'hex') WHERE job_record_id = $2`, other, source)
	if pgCode(err) != "23000" {
		t.Fatalf("owner change at 00014: %v, want 23000", err)
	}

	// Down: every row's hex text is back, byte for byte, in the text domains.
	migTo(t, pool, 13)
	if got := migDigestColumnTypes(t, pool); len(got) != len(textTypes) || got["principal_scope_hash"] != textTypes["principal_scope_hash"] ||
		got["submission_key_hash"] != textTypes["submission_key_hash"] || got["request_digest"] != textTypes["request_digest"] ||
		got["cancellation_key_hash"] != textTypes["cancellation_key_hash"] {
		t.Errorf("column types after down %v, want %v", got, textTypes)
	}
	if migTypeExists(t, pool, "etl_sha256_digest") {
		t.Error("domain etl_sha256_digest left after down")
	}
	rows, err = pool.Query(ctx, `SELECT job_record_id, principal_scope_hash::text, submission_key_hash::text,
		request_digest::text, coalesce(cancellation_key_hash, '') FROM etl_job_records`)
	if err != nil {
		t.Fatal(err)
	}
	seen = 0
	for rows.Next() {
		var id uuid.UUID
		var got migDigestRow
		if err := rows.Scan(&id, &got.owner, &got.key, &got.digest, &got.cancelKey); err != nil {
			t.Fatal(err)
		}
		seen++
		if w, ok := want[id]; !ok || got != w {
			t.Errorf("row %s after down: %+v, want %+v", id, got, w)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(want) {
		t.Fatalf("%d rows after down, want %d", seen, len(want))
	}
	// The format check of the text domain is back.
	_, err = pool.Exec(ctx, `UPDATE etl_job_records SET request_digest = upper(request_digest) WHERE job_record_id = $1`, pending)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "etl_job_request_digest_format_check" {
		t.Fatalf("uppercase digest after down: %v, want 23514 etl_job_request_digest_format_check", err)
	}
	// So are the functions' text bodies.
	var activeOwner13 string
	if err := pool.QueryRow(ctx, `SELECT principal_scope_hash FROM etl_ops_active_jobs(10) WHERE job_record_id = $1`, pending).
		Scan(&activeOwner13); err != nil || activeOwner13 != other {
		t.Fatalf("etl_ops_active_jobs owner after down: %q, %v, want %s", activeOwner13, err, other)
	}
	pendingCancelKey := pgtest.SHA("mig-14-cancel-3")
	var previous, cancelledDigest string
	if err := pool.QueryRow(ctx, `SELECT previous_status, request_digest FROM etl_cancel_job($1, $2, $3)`,
		pending, other, pendingCancelKey).Scan(&previous, &cancelledDigest); err != nil || previous != pg.StatusPending || cancelledDigest != digest {
		t.Fatalf("etl_cancel_job after down: %s %s, %v", previous, cancelledDigest, err)
	}

	// Up again: the repeated operator replay finds its job, and the
	// cancellation made at 00013 is the stored one.
	migUp(t, pool)
	pool.Reset()
	again, err := pg.OperatorReplayJob(ctx, pool, opReplay)
	if err != nil || again.Created || again.Job.JobID != created.Job.JobID || again.Job.RequestDigest != digest {
		t.Fatalf("repeated operator replay after up: %+v, %v", again, err)
	}
	if out, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: other, JobID: pending,
		CancellationKeyHash: pgtest.SHA("other")}); err != nil || out.Cancelled || out.StoredKeyHash != pendingCancelKey ||
		out.Job.Status != pg.StatusCancelled {
		t.Fatalf("repeated cancel after up: %+v, %v", out, err)
	}
	var bad int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records WHERE octet_length(principal_scope_hash) <> 32
		OR octet_length(submission_key_hash) <> 32 OR octet_length(request_digest) <> 32`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("rows with a digest not of 32 bytes after up: %d, %v", bad, err)
	}
}

// TestMigration00014RefusesWhileLeasesAreLive: a worker from before 00014
// would fail every job it claims after it (its integrity check would compare
// raw bytes with a hex digest), so the migration refuses while any job holds
// a live lease, changes nothing, and goes through once the lease has ended.
func TestMigration00014RefusesWhileLeasesAreLive(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	migTo(t, pool, 13)
	running := migInsertJob(t, pool, pgtest.SHA("guard-owner"), "[]")
	if _, err := pool.Exec(ctx, `UPDATE etl_job_records SET job_status = 'RUNNING', attempt_count = 1,
		lease_claim_id = gen_random_uuid(), lease_owner_id = 'old-worker-0001',
		lease_expires_at = clock_timestamp() + interval '10 minutes', lease_fencing_token = 1
		WHERE job_record_id = $1`, running); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE etl_job_claim_queue SET claimable_at = clock_timestamp() + interval '10 minutes'
		WHERE job_record_id = $1`, running); err != nil {
		t.Fatal(err)
	}
	err := pg.MigrateTo(ctx, pool, 14)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55006" {
		t.Fatalf("migrate to 14 with a live lease: %v, want SQLSTATE 55006", err)
	}
	if v := migApplied(t, pool); v != 13 {
		t.Fatalf("version %d after the refusal, want 13", v)
	}
	if types := migDigestColumnTypes(t, pool); types["request_digest"] == "etl_sha256_digest" {
		t.Error("request_digest converted by a refused migration")
	}
	// The lease ends (by the database clock): the migration goes through.
	if _, err := pool.Exec(ctx, `UPDATE etl_job_records SET lease_expires_at = clock_timestamp() - interval '1 second'
		WHERE job_record_id = $1`, running); err != nil {
		t.Fatal(err)
	}
	migTo(t, pool, 14)
	if types := migDigestColumnTypes(t, pool); types["request_digest"] != "etl_sha256_digest" {
		t.Errorf("request_digest is %s after the migration", types["request_digest"])
	}
}
