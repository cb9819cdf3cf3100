package pg_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// migPinnedSearchPath is the migration (00019) from which every trigger
// function runs with search_path = pg_catalog, public, pg_temp.
const migPinnedSearchPath = 19

// roleConn is one session that runs as role (the startup parameter "role"):
// a temporary table lives as long as its session, so an attack that plants
// one needs a single connection.
func roleConn(t *testing.T, url, role string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["role"] = role
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// plantShadowJobsSQL creates, in the session's temporary schema (first in
// its search_path), a table named etl_job_records whose one row claims job
// $1 for owner $2: what a lookup of the owner guard reads when it resolves
// the name through the session's search_path.
const plantShadowJobsSQL = `CREATE TEMP TABLE etl_job_records AS
	SELECT $1::uuid AS job_record_id, decode($2, 'hex') AS principal_scope_hash`

// forgedReplaySQL inserts, with the intake's column grants, a replay of job
// $3 owned by $1 under key $2, naming the real table.
const forgedReplaySQL = `INSERT INTO public.etl_job_records (job_record_id, job_kind, principal_scope_hash,
	submission_key_hash, request_digest, request_payload, max_attempts,
	replay_source_job_record_id, replay_root_job_record_id, replay_generation_count)
	VALUES (gen_random_uuid(), 'etl_records', decode($1, 'hex'), decode($2, 'hex'),
	        sha256(convert_to('[]', 'UTF8')), '[]', 3, $3, $3, 1)`

// A role with the intake's grants cannot make a replay that points at
// another owner's job by shadowing etl_job_records with a temporary table:
//   - the grant script revokes TEMPORARY on the database from PUBLIC and the
//     application roles, so the intake role cannot create one;
//   - where it still can (the revoke undone), the owner guard resolves the
//     table in public (migration 00019) and refuses the forged replay
//     (23503 etl_job_replay_owner_check); before 00019 it let it through.
func TestTemporaryTableCannotForgeReplayLineage(t *testing.T) {
	t.Parallel()
	admin, url := grantsSetup(t)
	ctx := context.Background()
	victimOwner, mallory := repeatHex("a"), repeatHex("b")
	victim := failedJob(t, admin, victimOwner, `[{"id":"v1"}]`)

	intake := roleConn(t, url, "mightyetl_intake_role")
	if _, err := intake.Exec(ctx, plantShadowJobsSQL, victim, mallory); !isInsufficientPrivilege(err) {
		t.Fatalf("temporary table as the intake role after the grant script: %v, want insufficient_privilege", err)
	}

	// Undo the revoke, as on a database the grant script never ran on.
	if _, err := admin.Exec(ctx, `DO $$ BEGIN
		EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO mightyetl_intake_role', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	attack := func(key string) error {
		t.Helper()
		conn := roleConn(t, url, "mightyetl_intake_role")
		if _, err := conn.Exec(ctx, plantShadowJobsSQL, victim, mallory); err != nil {
			t.Fatalf("plant the temporary table: %v", err)
		}
		_, err := conn.Exec(ctx, forgedReplaySQL, mallory, pgtest.SHA(key), victim)
		return err
	}
	forged := func() int {
		return pgtest.Count(t, admin, `SELECT count(*) FROM etl_job_records
			WHERE replay_source_job_record_id = $1 AND principal_scope_hash = decode($2, 'hex')`, victim, mallory)
	}

	// Before 00019 the attack works: the guard read the temporary table.
	if err := pg.MigrateTo(ctx, admin, migPinnedSearchPath-1); err != nil {
		t.Fatal(err)
	}
	if err := attack("forged-before"); err != nil {
		t.Fatalf("forged replay before %05d: %v, want it to succeed (the defect this migration fixes)", migPinnedSearchPath, err)
	}
	if n := forged(); n != 1 {
		t.Fatalf("forged replays before %05d: %d, want 1", migPinnedSearchPath, n)
	}
	if _, err := admin.Exec(ctx, `DELETE FROM etl_job_records WHERE replay_source_job_record_id = $1`, victim); err != nil {
		t.Fatal(err)
	}

	if err := pg.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	err := attack("forged-after")
	if code, name := constraintOf(err); code != "23503" || name != "etl_job_replay_owner_check" {
		t.Fatalf("forged replay after %05d: %v, want 23503 etl_job_replay_owner_check", migPinnedSearchPath, err)
	}
	if n := forged(); n != 0 {
		t.Fatalf("forged replays after %05d: %d, want 0", migPinnedSearchPath, n)
	}
}

// Every function the migrations create in schema public runs with a pinned
// search_path that names pg_temp last, so no session's temporary or other
// schema can stand in for a table, function or type it names unqualified.
func TestEveryFunctionPinsItsSearchPath(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	rows, err := pool.Query(context.Background(), `
		SELECT p.proname,
		       coalesce((SELECT substr(c, length('search_path=') + 1) FROM unnest(p.proconfig) c
		                 WHERE c LIKE 'search\_path=%'), '')
		FROM pg_proc p
		WHERE p.pronamespace = 'public'::regnamespace
		ORDER BY p.proname`)
	if err != nil {
		t.Fatal(err)
	}
	type fn struct{ name, path string }
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		return f, r.Scan(&f.name, &f.path)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) < 8 {
		t.Fatalf("%d functions in schema public; the migrations create at least 8 trigger functions", len(fns))
	}
	for _, f := range fns {
		parts := strings.Split(f.path, ",")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		if len(parts) < 2 || parts[0] != "pg_catalog" || parts[len(parts)-1] != "pg_temp" {
			t.Errorf("function %s: search_path %q, want it pinned from pg_catalog to pg_temp (last)", f.name, f.path)
		}
	}
}
