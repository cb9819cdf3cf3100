package pg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// migMaintenanceLeader is the migration (00022) that adds the maintenance
// leader row of the built-in retention (internal/maintenance).
const migMaintenanceLeader = 22

// Migration 00022 is additive: it adds etl_maintenance_leader and its
// compatibility row, which admits binary level 1 (the binaries released
// before it keep running), and its down removes both. Jobs written before
// it survive up and down untouched.
func TestMigration00022MaintenanceLeaderIsAdditive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 2})
	if err := pg.MigrateTo(ctx, pool, migMaintenanceLeader-1); err != nil {
		t.Fatal(err)
	}
	// A job as schema 21's binaries insert it (pg.InsertJobs writes 00025's
	// columns today).
	var job uuid.UUID
	if err := pool.QueryRow(ctx, `WITH ins AS (
	        INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
	                                     request_digest, request_payload, max_attempts)
	        VALUES (gen_random_uuid(), 'etl_records', sha256('m22-owner'), sha256('m22-key'), sha256('[{"id":"m22"}]'), '[{"id":"m22"}]', 1)
	        RETURNING job_record_id, available_at)
	    INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) SELECT job_record_id, available_at FROM ins
	    RETURNING job_record_id`).Scan(&job); err != nil {
		t.Fatal(err)
	}
	jobs := []uuid.UUID{job}

	leaderTable := func() bool {
		t.Helper()
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass('public.etl_maintenance_leader') IS NOT NULL`).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		return exists
	}
	compatRow := func() int64 {
		t.Helper()
		var level int64
		if err := pool.QueryRow(ctx, `SELECT coalesce(max(oldest_compatible_binary), 0) FROM etl_schema_compatibility
			WHERE schema_version = $1`, migMaintenanceLeader).Scan(&level); err != nil {
			t.Fatal(err)
		}
		return level
	}
	if leaderTable() || compatRow() != 0 {
		t.Fatal("the leader table or the compatibility row exists before 00022")
	}

	if err := pg.MigrateTo(ctx, pool, migMaintenanceLeader); err != nil {
		t.Fatalf("up: %v", err)
	}
	if !leaderTable() {
		t.Fatal("etl_maintenance_leader missing after 00022")
	}
	if got := compatRow(); got != 1 {
		t.Fatalf("schema 22 admits binaries from level %d, want 1 (purely additive)", got)
	}
	// This binary runs at 22 only while 22 is within its range (from 0.2.0
	// on it needs 24: the chunked-job tables).
	if c := pg.Compatible(migMaintenanceLeader, 1); c.Compatible != (migMaintenanceLeader >= pg.MinSchemaVersion) {
		t.Fatalf("this binary (range %d..%d) at schema 22: %+v", pg.MinSchemaVersion, pg.MaxSchemaVersion, c)
	}
	// The row's constraints: a lower-case name, a non-empty holder.
	for name, stmt := range map[string]string{
		"upper-case name": `INSERT INTO etl_maintenance_leader (leader_name, holder_id, leader_token, expires_at)
			VALUES ('Retention', 'w', gen_random_uuid(), clock_timestamp())`,
		"empty holder": `INSERT INTO etl_maintenance_leader (leader_name, holder_id, leader_token, expires_at)
			VALUES ('retention', '', gen_random_uuid(), clock_timestamp())`,
	} {
		var pgErr *pgconn.PgError
		if _, err := pool.Exec(ctx, stmt); !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("%s: %v, want check_violation", name, err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO etl_maintenance_leader (leader_name, holder_id, leader_token, expires_at)
		VALUES ('retention', 'worker-a', gen_random_uuid(), clock_timestamp() + interval '1 minute')`); err != nil {
		t.Fatalf("insert a leader row: %v", err)
	}

	if err := pg.MigrateTo(ctx, pool, migMaintenanceLeader-1); err != nil {
		t.Fatalf("down: %v", err)
	}
	if leaderTable() || compatRow() != 0 {
		t.Fatal("the leader table or the compatibility row survived the down")
	}
	if c, err := pg.CheckCompatibility(ctx, pool); err != nil || c.Compatible != (migMaintenanceLeader-1 >= pg.MinSchemaVersion) {
		t.Fatalf("this binary (range %d..%d) after the down to 21 (rollback): %+v, %v", pg.MinSchemaVersion, pg.MaxSchemaVersion, c, err)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_record_id = $1`, jobs[0]); n != 1 {
		t.Fatalf("the job written before 00022: %d rows after up and down", n)
	}
}
