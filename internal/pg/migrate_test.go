package pg_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/migrations"
)

// migrationFiles lists the embedded migration files in version order; each
// is named NNNNN_description.sql with NNNNN its version, 1, 2, 3, ...
func migrationFiles(t *testing.T) []string {
	t.Helper()
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	for i, f := range files {
		v, err := strconv.ParseInt(strings.SplitN(f, "_", 2)[0], 10, 64)
		if err != nil || v != int64(i+1) {
			t.Fatalf("migration %s: version %d (%v), want %d: versions must be contiguous from 1", f, v, err, i+1)
		}
	}
	if len(files) < 2 {
		t.Fatalf("only %d migrations embedded", len(files))
	}
	return files
}

// newestMigration is the version of the newest embedded migration.
func newestMigration(t *testing.T) int64 { return int64(len(migrationFiles(t))) }

// coreRelations are the objects migration 00001 creates, by pg_class kind.
var coreRelations = []string{
	"etl_job_records",
	"etl_idempotency_records",
	"processed_data",
	"etl_outbox_events",
	"etl_lease_fencing_token_sequence",
}

func migVersion(t *testing.T, pool *pgxpool.Pool) (applied, expected int64) {
	t.Helper()
	applied, expected, err := pg.SchemaVersion(context.Background(), pool)
	if err != nil {
		t.Fatalf("schema version: %v", err)
	}
	return applied, expected
}

func migRelationExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(),
		`SELECT to_regclass('public.' || quote_ident($1)) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func migColumnExists(t *testing.T, pool *pgxpool.Pool, table, column string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT EXISTS (
		SELECT 1 FROM information_schema.columns
		WHERE table_schema = 'public' AND table_name = $1 AND column_name = $2)`, table, column).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func migFunctionExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM pg_proc WHERE proname = $1)`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func migConstraintExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = $1)`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func migUp(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if err := pg.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
}

func migDown(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if err := pg.MigrateDown(context.Background(), pool); err != nil {
		t.Fatalf("migrate down: %v", err)
	}
}

// migByteaDigests is the migration (00014) from which principal_scope_hash,
// submission_key_hash and request_digest of etl_job_records are 32-byte
// bytea (domain etl_sha256_digest); before it they are 64-character
// lowercase hex text.
const migByteaDigests = 14

// migApplied is pool's applied schema version.
func migApplied(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	applied, _ := migVersion(t, pool)
	return applied
}

// migDigest is the SQL value of an identity digest column of etl_job_records
// at schema version v, given hexExpr, an SQL expression of its 64-character
// hex text: the text itself before migByteaDigests, its 32 bytes from then on.
func migDigest(v int64, hexExpr string) string {
	if v >= migByteaDigests {
		return "decode(" + hexExpr + ", 'hex')"
	}
	return hexExpr
}

// migPendingRowSQL inserts one PENDING job row on schema version v (any
// version: it names only columns of 00001). Its owner is repeat('a', 64) and
// its request digest repeat('b', 64), in hex.
func migPendingRowSQL(v int64) string {
	return `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
		request_digest, request_payload, job_status, max_attempts)
	VALUES (gen_random_uuid(), 'diagnostic', ` + migDigest(v, "repeat('a', 64)") + `, ` +
		migDigest(v, "encode(sha256(gen_random_uuid()::text::bytea), 'hex')") + `,
		` + migDigest(v, "repeat('b', 64)") + `, '{}', 'PENDING', 3)`
}

// migCancelledRowSQL inserts one CANCELLED job row on schema version v >= 2,
// owned as migPendingRowSQL's, with cancellation key hash repeat('c', 64).
func migCancelledRowSQL(v int64) string {
	return `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
		request_digest, request_payload, job_status, max_attempts,
		cancellation_key_hash, cancellation_code, job_cancelled_at)
	VALUES (gen_random_uuid(), 'diagnostic', ` + migDigest(v, "repeat('a', 64)") + `, ` +
		migDigest(v, "encode(sha256(gen_random_uuid()::text::bytea), 'hex')") + `,
		` + migDigest(v, "repeat('b', 64)") + `, NULL, 'CANCELLED', 3,
		repeat('c', 64), 'etl_job_cancelled_by_owner', clock_timestamp())`
}

// migInsertJob inserts a PENDING etl_records job of owner (hex) with payload
// by raw SQL valid at pool's schema version, and from migration 00005 on its
// claim-queue row, and returns its id: the product's InsertJobs speaks only
// the newest schema (bytea digests). Its submission key is fresh and its
// request digest is pgtest.SHA(payload).
func migInsertJob(t *testing.T, pool *pgxpool.Pool, owner, payload string) uuid.UUID {
	t.Helper()
	v := migApplied(t, pool)
	id := uuid.New()
	insert := `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
		request_digest, request_payload, max_attempts)
	VALUES ($1, 'etl_records', ` + migDigest(v, "$2::text") + `, ` + migDigest(v, "$3::text") + `, ` +
		migDigest(v, "$4::text") + `, $5, 3)
	RETURNING job_record_id, available_at`
	if v >= 5 {
		insert = `WITH j AS (` + insert + `)
		INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) SELECT job_record_id, available_at FROM j`
	}
	if _, err := pool.Exec(context.Background(), insert, id, owner, pgtest.SHA(uuid.NewString()), pgtest.SHA(payload), payload); err != nil {
		t.Fatalf("insert a job at version %d: %v", v, err)
	}
	return id
}

func migAssertCoreSchema(t *testing.T, pool *pgxpool.Pool, want bool) {
	t.Helper()
	for _, rel := range coreRelations {
		if got := migRelationExists(t, pool, rel); got != want {
			t.Errorf("relation %s exists = %v, want %v", rel, got, want)
		}
	}
	if got := migFunctionExists(t, pool, "etl_outbox_notify_relay"); got != want {
		t.Errorf("function etl_outbox_notify_relay exists = %v, want %v", got, want)
	}
}

func TestMigrateUpDownUpRoundTrip(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	newest := newestMigration(t)

	applied, expected := migVersion(t, pool)
	if applied != 0 || expected != newest {
		t.Fatalf("empty database: applied %d expected %d, want 0 and %d", applied, expected, newest)
	}
	migAssertCoreSchema(t, pool, false)

	migUp(t, pool)
	applied, expected = migVersion(t, pool)
	if applied != expected || applied != newest {
		t.Fatalf("after up: applied %d expected %d, want both %d", applied, expected, newest)
	}
	migAssertCoreSchema(t, pool, true)
	if !migColumnExists(t, pool, "etl_job_records", "cancellation_code") {
		t.Fatal("cancellation_code missing after up")
	}

	// Up is idempotent.
	migUp(t, pool)
	if applied, _ = migVersion(t, pool); applied != newest {
		t.Fatalf("second up moved version to %d", applied)
	}

	// Step down one migration at a time, checking the version each step.
	for v := newest; v > 0; v-- {
		migDown(t, pool)
		if applied, _ = migVersion(t, pool); applied != v-1 {
			t.Fatalf("after down from %d: applied %d, want %d", v, applied, v-1)
		}
	}
	migAssertCoreSchema(t, pool, false)
	// Nothing of the product schema is left: only goose's version table.
	var tables []string
	rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'S', 'v', 'm', 'p') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "mightyetl_schema_migrations") {
			tables = append(tables, name)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tables) != 0 {
		t.Fatalf("relations left after migrating down to 0: %v", tables)
	}

	// Below version 0 there is nothing to roll back.
	if err := pg.MigrateDown(ctx, pool); err == nil {
		t.Fatal("migrate down at version 0 succeeded")
	}

	// And up again from scratch.
	migUp(t, pool)
	applied, expected = migVersion(t, pool)
	if applied != expected || applied != newest {
		t.Fatalf("after re-up: applied %d expected %d", applied, expected)
	}
	migAssertCoreSchema(t, pool, true)
	if _, err := pool.Exec(ctx, migCancelledRowSQL(newest)); err != nil {
		t.Fatalf("insert CANCELLED row after re-up: %v", err)
	}
}

func TestMigrateToVersion(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	if err := pg.MigrateTo(ctx, pool, 1); err != nil {
		t.Fatal(err)
	}
	if applied, _ := migVersion(t, pool); applied != 1 {
		t.Fatalf("applied %d, want 1", applied)
	}
	if migColumnExists(t, pool, "etl_job_records", "cancellation_code") {
		t.Fatal("cancellation_code exists at version 1")
	}
	newest := newestMigration(t)
	if err := pg.MigrateTo(ctx, pool, newest); err != nil {
		t.Fatal(err)
	}
	if applied, _ := migVersion(t, pool); applied != newest {
		t.Fatalf("applied %d, want %d", applied, newest)
	}
	if err := pg.MigrateTo(ctx, pool, 0); err != nil {
		t.Fatal(err)
	}
	if applied, _ := migVersion(t, pool); applied != 0 {
		t.Fatalf("applied %d, want 0", applied)
	}
	migAssertCoreSchema(t, pool, false)
}

// Migration 00001 down removes every object it created, even with rows in them.
func TestMigration00001DownReverts(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	if err := pg.MigrateTo(ctx, pool, 1); err != nil {
		t.Fatal(err)
	}
	migAssertCoreSchema(t, pool, true)
	if _, err := pool.Exec(ctx, migPendingRowSQL(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO etl_outbox_events (event_kind) VALUES ('job_available')`); err != nil {
		t.Fatal(err)
	}
	migDown(t, pool)
	if applied, _ := migVersion(t, pool); applied != 0 {
		t.Fatalf("applied %d, want 0", applied)
	}
	migAssertCoreSchema(t, pool, false)
	var triggers int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = 'etl_outbox_notify_relay_trigger'`).Scan(&triggers); err != nil {
		t.Fatal(err)
	}
	if triggers != 0 {
		t.Fatal("outbox trigger survived the down migration")
	}
}

// Migration 00002 down removes the cancellation columns and constraints and
// restores the four-state status check.
func TestMigration00002DownReverts(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	migUp(t, pool)
	// Non-cancelled rows survive the down migration.
	if _, err := pool.Exec(ctx, migPendingRowSQL(migApplied(t, pool))); err != nil {
		t.Fatal(err)
	}
	if err := pg.MigrateTo(ctx, pool, 1); err != nil {
		t.Fatalf("down to 1: %v", err)
	}
	if applied, _ := migVersion(t, pool); applied != 1 {
		t.Fatalf("applied %d, want 1", applied)
	}
	for _, col := range []string{"cancellation_key_hash", "cancellation_code", "job_cancelled_at"} {
		if migColumnExists(t, pool, "etl_job_records", col) {
			t.Errorf("column %s survived the down migration", col)
		}
	}
	for _, c := range []string{"etl_job_cancellation_key_hash_format_check", "etl_job_cancellation_code_check", "etl_job_cancellation_lifecycle_check"} {
		if migConstraintExists(t, pool, c) {
			t.Errorf("constraint %s survived the down migration", c)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records WHERE job_status = 'PENDING'
		AND principal_scope_hash = repeat('a', 64) AND request_digest = repeat('b', 64)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("PENDING rows with their hex owner and digest after down: %d, want 1", n)
	}
	// The status check rejects CANCELLED again (a row otherwise terminal-shaped).
	_, err := pool.Exec(ctx, `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
		request_digest, request_payload, job_status, max_attempts)
	VALUES (gen_random_uuid(), 'diagnostic', repeat('a', 64), repeat('d', 64), repeat('b', 64), NULL, 'CANCELLED', 3)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "etl_job_status_check" {
		t.Fatalf("CANCELLED insert at version 1: %v, want 23514 etl_job_status_check", err)
	}
	// Up again restores it.
	migUp(t, pool)
	if _, err := pool.Exec(ctx, migCancelledRowSQL(migApplied(t, pool))); err != nil {
		t.Fatalf("insert CANCELLED after re-up: %v", err)
	}
}

// Migration 00003 down removes the replay lineage columns, keys, indexes
// and guard trigger, keeping the rows.
func TestMigration00003DownReverts(t *testing.T) {
	if newestMigration(t) < 3 {
		t.Skip("no migration 00003")
	}
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	if err := pg.MigrateTo(ctx, pool, 3); err != nil {
		t.Fatal(err)
	}
	cols := []string{"replay_source_job_record_id", "replay_root_job_record_id", "replay_generation_count"}
	constraints := []string{"etl_job_owner_scoped_identity_unique", "etl_job_replay_source_owner_fk",
		"etl_job_replay_root_owner_fk", "etl_job_replay_lineage_completeness_check"}
	indexes := []string{"etl_job_replay_source_lookup_index", "etl_job_replay_root_lookup_index"}
	present := func(want bool) {
		t.Helper()
		for _, c := range cols {
			if migColumnExists(t, pool, "etl_job_records", c) != want {
				t.Errorf("column %s exists = %v, want %v", c, !want, want)
			}
		}
		for _, c := range constraints {
			if migConstraintExists(t, pool, c) != want {
				t.Errorf("constraint %s exists = %v, want %v", c, !want, want)
			}
		}
		for _, i := range indexes {
			if migRelationExists(t, pool, i) != want {
				t.Errorf("index %s exists = %v, want %v", i, !want, want)
			}
		}
		if migFunctionExists(t, pool, "etl_job_replay_lineage_guard") != want {
			t.Errorf("function etl_job_replay_lineage_guard exists = %v, want %v", !want, want)
		}
	}
	present(true)
	if _, err := pool.Exec(ctx, migPendingRowSQL(3)); err != nil {
		t.Fatal(err)
	}
	if err := pg.MigrateTo(ctx, pool, 2); err != nil {
		t.Fatalf("down to 2: %v", err)
	}
	if applied, _ := migVersion(t, pool); applied != 2 {
		t.Fatalf("applied %d, want 2", applied)
	}
	present(false)
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("rows after down: %d, want 1", n)
	}
	if err := pg.MigrateTo(ctx, pool, 3); err != nil {
		t.Fatalf("up to 3 again: %v", err)
	}
	present(true)
}

// The 00002 down migration refuses while a CANCELLED row exists (it could
// not be represented at version 1) and leaves the schema at version 2.
func TestMigration00002DownRefusesWithCancelledRows(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	migUp(t, pool)
	if _, err := pool.Exec(ctx, migCancelledRowSQL(migApplied(t, pool))); err != nil {
		t.Fatalf("insert valid CANCELLED row: %v", err)
	}
	// Newer migrations roll back; 00002 refuses.
	err := pg.MigrateTo(ctx, pool, 1)
	if err == nil {
		t.Fatal("down migration of 00002 succeeded with a CANCELLED row present")
	}
	if !strings.Contains(err.Error(), "CANCELLED jobs exist") {
		t.Errorf("error does not say why: %v", err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55006" {
		t.Errorf("error %v is not a wrapped object_in_use (55006)", err)
	}
	if applied, _ := migVersion(t, pool); applied != 2 {
		t.Fatalf("applied %d after refused down, want 2", applied)
	}
	for _, col := range []string{"cancellation_key_hash", "cancellation_code", "job_cancelled_at"} {
		if !migColumnExists(t, pool, "etl_job_records", col) {
			t.Errorf("column %s dropped by a refused down migration", col)
		}
	}
	if !migConstraintExists(t, pool, "etl_job_cancellation_lifecycle_check") {
		t.Error("cancellation lifecycle check dropped by a refused down migration")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records WHERE job_status = 'CANCELLED'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("CANCELLED rows %d, want 1", n)
	}
	// Once the row is gone the down migration proceeds.
	if _, err := pool.Exec(ctx, `DELETE FROM etl_job_records WHERE job_status = 'CANCELLED'`); err != nil {
		t.Fatal(err)
	}
	migDown(t, pool)
	if applied, _ := migVersion(t, pool); applied != 1 {
		t.Fatalf("applied %d, want 1", applied)
	}
}

func TestMigrationStatusListsEveryMigration(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	files := migrationFiles(t)
	if files[0] != "00001_durable_job_core.sql" || files[1] != "00002_durable_job_cancellation.sql" {
		t.Fatalf("unexpected first migrations: %v", files[:2])
	}

	status := func() map[string]string {
		t.Helper()
		var buf bytes.Buffer
		if err := pg.MigrationStatus(ctx, pool, &buf); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
		if len(lines) != len(files) {
			t.Fatalf("status has %d lines, want %d:\n%s", len(lines), len(files), buf.String())
		}
		out := map[string]string{}
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) < 3 {
				t.Fatalf("status line %q malformed", l)
			}
			out[f[1]] = f[0] + " " + f[2]
		}
		return out
	}
	check := func(appliedUpTo int) {
		t.Helper()
		st := status()
		for i, f := range files {
			want := fmt.Sprintf("%05d pending", i+1)
			if i < appliedUpTo {
				want = fmt.Sprintf("%05d applied", i+1)
			}
			if st[f] != want {
				t.Errorf("at version %d: %s is %q, want %q", appliedUpTo, f, st[f], want)
			}
		}
	}

	check(0)
	if err := pg.MigrateTo(ctx, pool, 1); err != nil {
		t.Fatal(err)
	}
	check(1)
	migUp(t, pool)
	check(len(files))
}

func TestEnsureDatabaseCreatesMissingDatabaseOnce(t *testing.T) {
	server := pgtest.ServerURL(t)
	ctx := context.Background()
	name := "mightyetl_ensure_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	t.Cleanup(func() { pgtest.DropDatabase(t, name) })
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	target := u.String()

	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	exists := func() bool {
		t.Helper()
		var ok bool
		if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if exists() {
		t.Fatalf("database %s exists before the test", name)
	}

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if err := pg.EnsureDatabase(ctx, target, log); err != nil {
		t.Fatalf("ensure missing database: %v", err)
	}
	if !exists() {
		t.Fatal("EnsureDatabase did not create the database")
	}
	if !strings.Contains(logs.String(), "created database") {
		t.Errorf("creation not logged: %q", logs.String())
	}
	if strings.Contains(logs.String(), name) {
		t.Errorf("log names the database: %q", logs.String())
	}
	var oid uint32
	if err := admin.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = $1`, name).Scan(&oid); err != nil {
		t.Fatal(err)
	}

	// Second call: a no-op (same database, nothing logged).
	logs.Reset()
	if err := pg.EnsureDatabase(ctx, target, log); err != nil {
		t.Fatalf("ensure existing database: %v", err)
	}
	var oid2 uint32
	if err := admin.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = $1`, name).Scan(&oid2); err != nil {
		t.Fatal(err)
	}
	if oid2 != oid {
		t.Fatal("EnsureDatabase recreated an existing database")
	}
	if logs.Len() != 0 {
		t.Errorf("no-op call logged: %q", logs.String())
	}

	// The created database is usable: it can be migrated.
	pool := pgtest.NewPool(t, target, 2)
	migUp(t, pool)
	if applied, expected := migVersion(t, pool); applied != expected {
		t.Fatalf("applied %d expected %d", applied, expected)
	}
	pool.Close()
}

func TestEnsureDatabaseLeavesMaintenanceDatabaseAlone(t *testing.T) {
	if err := pg.EnsureDatabase(context.Background(), pgtest.ServerURL(t), nil); err != nil {
		t.Fatal(err)
	}
	if err := pg.EnsureDatabase(context.Background(), "postgres://%zz", nil); err == nil {
		t.Fatal("unparseable URL accepted")
	}
}

// Migration 00005 moves claim eligibility into etl_job_claim_queue: existing
// PENDING and RUNNING jobs get their queue rows (claimable at available_at and
// at the lease expiry), terminal jobs none; the old partial indexes go, and
// the new format checks accept and refuse exactly what the regular
// expressions did (checked at version 5: from 00014 on the identity digests
// are 32-byte bytea, whose length check is checked at the newest version).
// Down restores the indexes and drops the queue, keeping every job row; up
// again re-queues them.
func TestMigration00005QueuesExistingJobsAndDownReverts(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	if err := pg.MigrateTo(ctx, pool, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, migPendingRowSQL(4)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, migCancelledRowSQL(4)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
		request_digest, request_payload, job_status, attempt_count, max_attempts,
		lease_claim_id, lease_owner_id, lease_expires_at, lease_fencing_token)
	VALUES (gen_random_uuid(), 'diagnostic', repeat('a', 64), repeat('e', 64), repeat('b', 64), '{}', 'RUNNING', 1, 3,
		gen_random_uuid(), 'worker-mig-0005', clock_timestamp() + interval '1 hour', nextval('etl_lease_fencing_token_sequence'))`); err != nil {
		t.Fatal(err)
	}
	if err := pg.MigrateTo(ctx, pool, 5); err != nil {
		t.Fatal(err)
	}
	if migRelationExists(t, pool, "etl_job_claim_eligibility_index") || migRelationExists(t, pool, "etl_job_lease_expiry_index") {
		t.Error("the job row's eligibility indexes survived 00005")
	}
	var queued, matching int
	if err := pool.QueryRow(ctx, `SELECT count(*),
		count(*) FILTER (WHERE q.claimable_at = CASE j.job_status WHEN 'PENDING' THEN j.available_at ELSE j.lease_expires_at END)
		FROM etl_job_claim_queue q JOIN etl_job_records j USING (job_record_id)`).Scan(&queued, &matching); err != nil {
		t.Fatal(err)
	}
	if queued != 2 || matching != 2 {
		t.Fatalf("queued %d (%d at the right time), want the PENDING and the RUNNING job", queued, matching)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)

	// The rewritten format checks: same accepted and refused sets.
	for _, c := range []struct {
		name, set string
		ok        bool
	}{
		{"hex digest ok", `request_digest = repeat('0123456789abcdef', 4)`, true},
		{"hex digest uppercase", `request_digest = repeat('A', 64)`, false},
		{"hex digest short", `request_digest = repeat('a', 63)`, false},
		{"hex digest long", `request_digest = repeat('a', 65)`, false},
		{"hex digest non-ascii", `request_digest = repeat('a', 63) || 'é'`, false},
		{"owner hash space", `principal_scope_hash = repeat('a', 63) || ' '`, false},
		{"submission key hash g", `submission_key_hash = repeat('a', 63) || 'g'`, false},
	} {
		_, err := pool.Exec(ctx, `UPDATE etl_job_records SET `+c.set+` WHERE job_status = 'PENDING'`)
		if c.ok != (err == nil) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	for _, c := range []struct {
		owner string
		ok    bool
	}{
		{"worker-A.b_c:d-9", true}, {"abcdefgh", true}, {"abcdefg", false}, {strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false}, {"worker 1234", false}, {"worker/1234", false}, {"wörker-1234", false},
	} {
		_, err := pool.Exec(ctx, `UPDATE etl_job_records SET lease_owner_id = $1 WHERE job_status = 'RUNNING'`, c.owner)
		if c.ok != (err == nil) {
			t.Errorf("owner %q: %v", c.owner, err)
		}
	}
	for _, c := range []struct {
		code string
		ok   bool
	}{
		{"etl_target_failure", true}, {"abc", true}, {"ab", false}, {"1bc", false}, {"_bc", false}, {"Abc", false},
		{"a" + strings.Repeat("b", 127), true}, {"a" + strings.Repeat("b", 128), false}, {"abc-d", false},
	} {
		_, err := pool.Exec(ctx, `UPDATE etl_job_records SET job_status = 'FAILED', failure_code = $1, request_payload = NULL
			WHERE job_status = 'PENDING'`, c.code)
		if c.ok != (err == nil) {
			t.Errorf("failure code %q: %v", c.code, err)
		}
		if err == nil {
			if _, err := pool.Exec(ctx, `UPDATE etl_job_records SET job_status = 'PENDING', failure_code = NULL, request_payload = '{}'
				WHERE job_status = 'FAILED'`); err != nil {
				t.Fatal(err)
			}
		}
	}

	if err := pg.MigrateTo(ctx, pool, 4); err != nil {
		t.Fatalf("down to 4: %v", err)
	}
	if migRelationExists(t, pool, "etl_job_claim_queue") {
		t.Error("etl_job_claim_queue survived the down migration")
	}
	for _, idx := range []string{"etl_job_claim_eligibility_index", "etl_job_lease_expiry_index"} {
		if !migRelationExists(t, pool, idx) {
			t.Errorf("%s not restored by the down migration", idx)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("job rows after down: %d %v, want 3", n, err)
	}
	// Migration 00014 refuses while a job holds a live lease (stop the
	// workers first): this RUNNING row's lease has ended.
	if _, err := pool.Exec(ctx, `UPDATE etl_job_records SET lease_expires_at = clock_timestamp() - interval '1 minute'
		WHERE job_status = 'RUNNING'`); err != nil {
		t.Fatal(err)
	}
	migUp(t, pool)
	pgtest.AssertClaimQueueConsistent(t, pool)

	// At the newest version the identity digests are exactly 32 bytes
	// (etl_sha256_digest, migration 00014).
	for _, c := range []struct {
		name, set string
		ok        bool
	}{
		{"digest 32 bytes", `request_digest = decode(repeat('0123456789abcdef', 4), 'hex')`, true},
		{"digest 31 bytes", `request_digest = decode(repeat('ab', 31), 'hex')`, false},
		{"digest 33 bytes", `request_digest = decode(repeat('ab', 33), 'hex')`, false},
		{"digest of hex text", `request_digest = convert_to(repeat('a', 64), 'UTF8')`, false},
		{"submission key hash 31 bytes", `submission_key_hash = decode(repeat('ab', 31), 'hex')`, false},
		{"submission key hash 33 bytes", `submission_key_hash = decode(repeat('ab', 33), 'hex')`, false},
	} {
		_, err := pool.Exec(ctx, `UPDATE etl_job_records SET `+c.set+` WHERE job_status = 'PENDING'`)
		var pgErr *pgconn.PgError
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok && (!errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "etl_sha256_digest_length_check") {
			t.Errorf("%s: %v, want 23514 etl_sha256_digest_length_check", c.name, err)
		}
	}
}

// Migration 00006 lets one lifecycle outbox row carry a finish group; down
// turns each group row back into one plain row per job, in member order.
func TestMigration00006DownExpandsGroupRows(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	migUp(t, pool)
	if _, err := pool.Exec(ctx, `INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts)
		VALUES ('job_lifecycle', 'SUCCEEDED', ARRAY['00000000-0000-7000-8000-000000000001'::uuid, '00000000-0000-7000-8000-000000000002'::uuid], ARRAY[1, 2])`); err != nil {
		t.Fatal(err)
	}
	for name, stmt := range map[string]string{
		"arrays of different length": `INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts) VALUES ('job_lifecycle', 'SUCCEEDED', ARRAY[gen_random_uuid()], ARRAY[1, 2])`,
		"empty group":                `INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts) VALUES ('job_lifecycle', 'SUCCEEDED', '{}', '{}')`,
		"NULL member":                `INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts) VALUES ('job_lifecycle', 'SUCCEEDED', ARRAY[NULL::uuid], ARRAY[1])`,
		"job id and group":           `INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, job_record_ids, attempt_counts) VALUES ('job_lifecycle', gen_random_uuid(), 'SUCCEEDED', ARRAY[gen_random_uuid()], ARRAY[1])`,
		"group on a revocation row":  `INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts) VALUES ('lease_revoked', 'CANCELLED', ARRAY[gen_random_uuid()], ARRAY[1])`,
	} {
		_, err := pool.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("%s: %v, want a check violation", name, err)
		}
	}
	if err := pg.MigrateTo(ctx, pool, 5); err != nil {
		t.Fatalf("down to 5: %v", err)
	}
	if migColumnExists(t, pool, "etl_outbox_events", "job_record_ids") || migRelationExists(t, pool, "etl_outbox_job_events") {
		t.Fatal("00006 objects survived the down migration")
	}
	rows, err := pool.Query(ctx, `SELECT job_record_id::text, attempt_count FROM etl_outbox_events ORDER BY outbox_event_id`)
	if err != nil {
		t.Fatal(err)
	}
	type plain struct {
		job      string
		attempts int
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (plain, error) {
		var p plain
		return p, r.Scan(&p.job, &p.attempts)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []plain{{"00000000-0000-7000-8000-000000000001", 1}, {"00000000-0000-7000-8000-000000000002", 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("plain rows after down %v, want %v", got, want)
	}
	migUp(t, pool)
}

// Migration 00007 replaces the owner-scoped composite keys of replay lineage
// (and the unique index every job insert paid for) with primary-key foreign
// keys plus an owner guard that fires only for rows with lineage: a replay of
// another owner's source or root is refused with 23503 as before, a job's
// owner can never change, and down restores the composite keys.
func TestMigration00007GuardsReplayOwnersWithoutTheIdentityIndex(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	migUp(t, pool)
	if migConstraintExists(t, pool, "etl_job_owner_scoped_identity_unique") {
		t.Fatal("the owner-scoped identity index survived 00007")
	}
	v := migApplied(t, pool)
	insert := func(id, owner, source, root string, gen any) error {
		_, err := pool.Exec(ctx, `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
			request_digest, request_payload, job_status, max_attempts, failure_code,
			replay_source_job_record_id, replay_root_job_record_id, replay_generation_count)
			VALUES ($1::uuid, 'diagnostic', `+migDigest(v, "$2::text")+`, `+migDigest(v, "encode(sha256(convert_to($1::text, 'UTF8')), 'hex')")+`,
			`+migDigest(v, "repeat('b', 64)")+`, NULL, 'FAILED', 3, 'etl_internal_error',
			NULLIF($3, '')::uuid, NULLIF($4, '')::uuid, $5)`, id, owner, source, root, gen)
		return err
	}
	const (
		rootA  = "00000000-0000-7000-8000-00000000000a"
		srcA   = "00000000-0000-7000-8000-00000000000b"
		otherB = "00000000-0000-7000-8000-00000000000c"
	)
	ownerA, ownerB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	for _, err := range []error{
		insert(rootA, ownerA, "", "", nil),
		insert(srcA, ownerA, rootA, rootA, 1),
		insert(otherB, ownerB, "", "", nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, err := range map[string]error{
		"source of another owner": insert("00000000-0000-7000-8000-0000000000d1", ownerB, srcA, rootA, 2),
		"root of another owner":   insert("00000000-0000-7000-8000-0000000000d2", ownerA, srcA, otherB, 2),
		"missing source":          insert("00000000-0000-7000-8000-0000000000d3", ownerA, "00000000-0000-7000-8000-0000000000ff", rootA, 2),
	} {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23503" {
			t.Errorf("%s: %v, want 23503", name, err)
		}
	}
	if err := insert("00000000-0000-7000-8000-0000000000d4", ownerA, srcA, rootA, 2); err != nil {
		t.Fatalf("same-owner replay: %v", err)
	}
	_, err := pool.Exec(ctx, `UPDATE etl_job_records SET principal_scope_hash = `+migDigest(v, "$1::text")+` WHERE job_record_id = $2`, ownerA, otherB)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23000" {
		t.Fatalf("owner change: %v, want 23000", err)
	}
	if err := pg.MigrateTo(ctx, pool, 6); err != nil {
		t.Fatalf("down to 6: %v", err)
	}
	for _, c := range []string{"etl_job_owner_scoped_identity_unique", "etl_job_replay_source_owner_fk", "etl_job_replay_root_owner_fk"} {
		if !migConstraintExists(t, pool, c) {
			t.Errorf("%s not restored by the down migration", c)
		}
	}
	// The owners are hex text again, as inserted.
	var owned int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records WHERE principal_scope_hash = $1`, ownerA).Scan(&owned); err != nil || owned != 3 {
		t.Fatalf("jobs of owner A after down: %d %v, want 3", owned, err)
	}
	migUp(t, pool)
}
