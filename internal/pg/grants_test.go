package pg_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/outbox"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// applyGrantScript runs deploy/postgres/least-privilege.sql (without its psql
// meta-commands) on the test database.
func applyGrantScript(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/postgres/least-privilege.sql")
	if err != nil {
		t.Fatal(err)
	}
	var sql strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), `\`) {
			sql.WriteString(line + "\n")
		}
	}
	if _, err := conn.Exec(ctx, sql.String()); err != nil {
		t.Fatalf("grant script: %v", err)
	}
}

func isInsufficientPrivilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// The worker role of the grant script can run the whole lease life cycle and
// nothing else: it cannot rewrite ownership, hashes or digests, nor delete
// jobs.
func TestWorkerRoleRunsLeasesAndNothingMore(t *testing.T) {
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	applyGrantScript(t, ctx, conn)
	applyGrantScript(t, ctx, conn) // idempotent

	payload := `[{"id":"g1"}]`
	pgtest.InsertJobs(t, pool, pg.NewJob{Payload: payload, MaxAttempts: 2})
	asWorker := func(fn func(tx pgx.Tx) error) error {
		return pg.WithTx(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE mightyetl_worker_role"); err != nil {
				return err
			}
			return fn(tx)
		})
	}
	var c lease.Claim
	err = asWorker(func(tx pgx.Tx) error {
		// The fair claim (the worker's default): it locks and moves the
		// owner it serves (migration 00025).
		res, err := lease.ClaimJobs(ctx, tx, lease.ClaimParams{OwnerID: "grant-worker", Limit: 2, LeaseDuration: time.Minute, Owners: 32})
		if err == nil && len(res.Claimed) == 1 {
			c = res.Claimed[0]
		}
		return err
	})
	if err != nil || c.ClaimID.String() == "" {
		t.Fatalf("claim as worker role: %v", err)
	}
	if err := asWorker(func(tx pgx.Tx) error {
		ren, err := lease.Renew(ctx, tx, c.OwnerID, []lease.Ref{c.Ref}, time.Minute)
		if err == nil && !ren[0].Renewed {
			t.Error("renewal did not renew")
		}
		return err
	}); err != nil {
		t.Fatalf("renew as worker role: %v", err)
	}
	if err := asWorker(func(tx pgx.Tx) error {
		won, err := pgtest.SucceedOne(ctx, tx, c.Ref)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO processed_data (job_record_id, data, normalized_record) VALUES ($1, 'ID:g1,', '{"ID":"g1"}')`, won.JobID)
		return err
	}); err != nil {
		t.Fatalf("finish as worker role: %v", err)
	}
	for name, stmt := range map[string]string{
		// Values of the columns' type (32-byte bytea, migration 00014): the
		// privilege check, not a type error, must refuse these.
		"rewrite owner":  `UPDATE etl_job_records SET principal_scope_hash = decode(repeat('00', 32), 'hex')`,
		"rewrite digest": `UPDATE etl_job_records SET request_digest = decode(repeat('00', 32), 'hex')`,
		"delete jobs":    `DELETE FROM etl_job_records`,
		"delete ledger":  `DELETE FROM etl_idempotency_records`,
		"delete outbox":  `DELETE FROM etl_outbox_events`,
		"write ledger": `INSERT INTO etl_idempotency_records (principal_scope_hash, idempotency_key_hash, request_digest, response_text)
			VALUES (repeat('0', 64), repeat('0', 64), repeat('0', 64), 'x')`,
		"queue a job":              `INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) SELECT job_record_id, clock_timestamp() FROM etl_job_records LIMIT 1`,
		"cancel through the fn":    `SELECT * FROM etl_cancel_job(gen_random_uuid(), repeat('0', 64), repeat('0', 64))`,
		"create a table in public": appRoleDenials["create a table in public"],
		"create a function":        appRoleDenials["create a function"],
	} {
		err := asWorker(func(tx pgx.Tx) error { _, err := tx.Exec(ctx, stmt); return err })
		if !isInsufficientPrivilege(err) {
			t.Errorf("%s as worker role: %v, want insufficient_privilege", name, err)
		}
	}
}

// rolePool is a pool whose sessions run as role (the startup parameter
// "role", what ALTER ROLE ... SET role does for a login of the group role):
// every statement is checked against role's privileges alone.
func rolePool(t *testing.T, url, role string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["role"] = role
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var current string
	if err := pool.QueryRow(context.Background(), "SELECT current_user").Scan(&current); err != nil || current != role {
		t.Fatalf("session role = %q, %v; want %s", current, err, role)
	}
	return pool
}

// grantsSetup gives a fresh database with the grant script applied, after
// running the statements before (as the superuser) to simulate drift.
func grantsSetup(t *testing.T, before ...string) (*pgxpool.Pool, string) {
	t.Helper()
	pool, url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, stmt := range before {
		if _, err := conn.Exec(context.Background(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	applyGrantScript(t, context.Background(), conn)
	return pool, url
}

// assertDenied runs each statement as the pool's role, each in its own
// rolled-back transaction, and wants insufficient_privilege.
func assertDenied(t *testing.T, pool *pgxpool.Pool, role string, stmts map[string]string) {
	t.Helper()
	ctx := context.Background()
	for name, stmt := range stmts {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, stmt)
		_ = tx.Rollback(ctx)
		if !isInsufficientPrivilege(err) {
			t.Errorf("%s as %s: %v, want insufficient_privilege", name, role, err)
		}
	}
}

// Denied to every application role: creating objects in schema public or
// temporary tables (a temporary table comes first in a session's
// search_path).
var appRoleDenials = map[string]string{
	"create a table in public": `CREATE TABLE planted_table (x int)`,
	"create a function":        `CREATE FUNCTION planted_function() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
	"create a temporary table": `CREATE TEMP TABLE planted_temporary_table (x int)`,
}

// The intake role of the grant script runs every intake store function
// (submit, resubmit, status, list, cancel of a pending and of a running job,
// replay, the synchronous ledger and target) and nothing more: it cannot
// read payloads or leases, write a lease, fencing token, status or payload,
// dequeue or delete jobs, or draw fencing tokens.
func TestIntakeRoleRunsItsStoreFunctionsAndNothingMore(t *testing.T) {
	admin, url := grantsSetup(t)
	ctx := context.Background()
	ip := rolePool(t, url, "mightyetl_intake_role")
	owner := pgtest.SHA("intake-owner")

	newJob := func(key, payload string) pg.NewJob {
		return pg.NewJob{Kind: pg.KindETLRecords, PrincipalScopeHash: owner, SubmissionKeyHash: pgtest.SHA(key),
			RequestDigest: pgtest.SHA(payload), Payload: payload, MaxAttempts: 2}
	}
	ins, err := pg.InsertJobs(ctx, ip, []pg.NewJob{newJob("k1", `[{"id":"1"}]`), newJob("k2", `[{"id":"2"}]`)})
	if err != nil || len(ins) != 2 || !ins[0].Created || !ins[1].Created {
		t.Fatalf("submit as intake: %+v, %v", ins, err)
	}
	again, err := pg.InsertJobs(ctx, ip, []pg.NewJob{newJob("k1", `[{"id":"1"}]`)})
	if err != nil || again[0].Created || again[0].JobID != ins[0].JobID {
		t.Fatalf("resubmit as intake: %+v, %v", again, err)
	}
	if j, err := pg.GetJob(ctx, ip, owner, ins[0].JobID); err != nil || j.Status != pg.StatusPending {
		t.Fatalf("status as intake: %+v, %v", j, err)
	}
	if list, err := pg.ListJobs(ctx, ip, pg.ListParams{PrincipalScopeHash: owner, Limit: 10}); err != nil || len(list) != 2 {
		t.Fatalf("list as intake: %d jobs, %v", len(list), err)
	}
	// The pending-jobs quota's count (migration 00025's owner index).
	if n, err := pg.CountOwnerPendingJobs(ctx, ip, owner, 100); err != nil || n != 2 {
		t.Fatalf("pending count as intake: %d, %v", n, err)
	}

	// A worker (the admin here) claims one job; the intake cancels it
	// (RUNNING) and the other (PENDING) through etl_cancel_job.
	var running uuid.UUID
	if err := pg.WithTx(ctx, admin, func(tx pgx.Tx) error {
		res, err := lease.ClaimJobs(ctx, tx, lease.ClaimParams{OwnerID: "grant-worker", Limit: 1, LeaseDuration: time.Minute})
		if err == nil && len(res.Claimed) == 1 {
			running = res.Claimed[0].JobID
		}
		return err
	}); err != nil || running == uuid.Nil {
		t.Fatalf("claim: %v", err)
	}
	for _, id := range []uuid.UUID{ins[0].JobID, ins[1].JobID} {
		out, err := pg.CancelJob(ctx, ip, pg.CancelParams{PrincipalScopeHash: owner, JobID: id, CancellationKeyHash: pgtest.SHA("cancel-" + id.String())})
		if err != nil || !out.Cancelled {
			t.Fatalf("cancel as intake: %+v, %v", out, err)
		}
		if (id == running) != (out.PreviousStatus == pg.StatusRunning) {
			t.Fatalf("cancel of %v: previous status %s", id == running, out.PreviousStatus)
		}
	}
	out, err := pg.CancelJob(ctx, ip, pg.CancelParams{PrincipalScopeHash: owner, JobID: running, CancellationKeyHash: pgtest.SHA("other")})
	if err != nil || out.Cancelled || out.StoredKeyHash != pgtest.SHA("cancel-"+running.String()) {
		t.Fatalf("repeated cancel as intake: %+v, %v", out, err)
	}
	if _, err := pg.CancelJob(ctx, ip, pg.CancelParams{PrincipalScopeHash: pgtest.SHA("someone else"), JobID: ins[0].JobID,
		CancellationKeyHash: pgtest.SHA("x")}); !errors.Is(err, pg.ErrNotFound) {
		t.Fatalf("foreign cancel as intake: %v", err)
	}
	var revocations int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM etl_outbox_events WHERE event_kind = 'lease_revoked'`).Scan(&revocations); err != nil || revocations != 1 {
		t.Fatalf("revocation rows = %d, %v", revocations, err)
	}
	rep, err := pg.ReplayJob(ctx, ip, pg.ReplayParams{PrincipalScopeHash: owner, SourceJobID: ins[0].JobID,
		ReplayKeyHash: pgtest.SHA("replay-1"), RequestDigest: pgtest.SHA(`[{"id":"1"}]`), Payload: `[{"id":"1"}]`})
	if err != nil || !rep.Created || rep.Job.Lineage == nil {
		t.Fatalf("replay as intake: %+v, %v", rep, err)
	}
	if _, claimed, err := pg.ClaimLedgerEntry(ctx, ip, pg.LedgerEntry{PrincipalScopeHash: owner, IdempotencyKeyHash: pgtest.SHA("sync-1"),
		RequestDigest: pgtest.SHA("body"), ResponseText: "{}"}); err != nil || !claimed {
		t.Fatalf("ledger as intake: %v, %v", claimed, err)
	}
	if _, err := ip.Exec(ctx, `INSERT INTO processed_data (data, normalized_record) VALUES ('ID:s1,', '{"ID":"s1"}')`); err != nil {
		t.Fatalf("synchronous target row as intake: %v", err)
	}

	denied := map[string]string{
		"read payloads":             `SELECT request_payload FROM etl_job_records`,
		"read whole rows":           `SELECT * FROM etl_job_records`,
		"read leases":               `SELECT lease_claim_id, lease_owner_id, lease_expires_at FROM etl_job_records`,
		"read fencing tokens":       `SELECT lease_fencing_token FROM etl_job_records`,
		"set a lease":               `UPDATE etl_job_records SET lease_owner_id = 'intake-forged', lease_expires_at = clock_timestamp()`,
		"set a fencing token":       `UPDATE etl_job_records SET lease_fencing_token = 1`,
		"clear a lease":             `UPDATE etl_job_records SET lease_claim_id = NULL`,
		"set a status":              `UPDATE etl_job_records SET job_status = 'SUCCEEDED'`,
		"set a payload":             `UPDATE etl_job_records SET request_payload = '[]'`,
		"set an attempt count":      `UPDATE etl_job_records SET attempt_count = 0`,
		"set a cancellation":        `UPDATE etl_job_records SET cancellation_code = 'etl_job_cancelled_by_owner'`,
		"insert a lease":            `INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest, request_payload, max_attempts, job_status, lease_fencing_token) VALUES (gen_random_uuid(), 'etl_records', decode(repeat('aa', 32), 'hex'), decode(repeat('bb', 32), 'hex'), decode(repeat('cc', 32), 'hex'), '[]', 1, 'RUNNING', 1)`,
		"delete jobs":               `DELETE FROM etl_job_records`,
		"dequeue jobs":              `DELETE FROM etl_job_claim_queue`,
		"read the claim queue":      `SELECT * FROM etl_job_claim_queue`,
		"move the claim queue":      `UPDATE etl_job_claim_queue SET claimable_at = clock_timestamp()`,
		"read the outbox":           `SELECT * FROM etl_outbox_events`,
		"delete the outbox":         `DELETE FROM etl_outbox_events`,
		"draw a fencing token":      `SELECT nextval('etl_lease_fencing_token_sequence')`,
		"read the target":           `SELECT * FROM processed_data`,
		"delete the ledger":         `DELETE FROM etl_idempotency_records`,
		"write the schema versions": `DELETE FROM mightyetl_schema_migrations`,
	}
	for k, v := range appRoleDenials {
		denied[k] = v
	}
	assertDenied(t, ip, "mightyetl_intake_role", denied)
	// UPDATE (principal_scope_hash) exists for the replay's FOR UPDATE; it
	// cannot change an owner: the owner guard (migration 00007) refuses a
	// well-typed new value.
	if _, err := ip.Exec(ctx, `UPDATE etl_job_records SET principal_scope_hash = decode(repeat('00', 32), 'hex')`); pgCode(err) != "23000" {
		t.Fatalf("intake changing a job's owner: %v, want the owner guard's 23000", err)
	}
}

// The relay role publishes and deletes outbox rows (the real relay, against
// real NATS) and can do nothing else.
func TestRelayRoleRelaysTheOutboxAndNothingMore(t *testing.T) {
	admin, url := grantsSetup(t)
	ctx := context.Background()
	owner := pgtest.SHA("relay-owner")
	id := pgtest.InsertJobs(t, admin, pg.NewJob{PrincipalScopeHash: owner, MaxAttempts: 1})[0]
	if _, err := pg.CancelJob(ctx, admin, pg.CancelParams{PrincipalScopeHash: owner, JobID: id, CancellationKeyHash: pgtest.SHA("c")}); err != nil {
		t.Fatal(err)
	}
	rp := rolePool(t, url, "mightyetl_relay_role")
	nc := natstest.Connect(t, natstest.URL(t))
	relay, err := outbox.New(rp, nc, natstest.Prefix(t), nil, metrics.NewOutbox(nil), outbox.Options{PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		t.Fatalf("relay as relay role: %v", err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = relay.Stop(sctx)
	})
	testwait.For(t, 30*time.Second, "the relay role drained the outbox", func() bool {
		var n int
		return admin.QueryRow(ctx, `SELECT count(*) FROM etl_outbox_events`).Scan(&n) == nil && n == 0
	})
	denied := map[string]string{
		"read jobs":             `SELECT job_status FROM etl_job_records`,
		"read payloads":         `SELECT request_payload FROM etl_job_records`,
		"write jobs":            `UPDATE etl_job_records SET job_status = 'FAILED'`,
		"write outbox rows":     `INSERT INTO etl_outbox_events (event_kind, job_status, job_record_ids, attempt_counts) VALUES ('job_available', 'PENDING', ARRAY[gen_random_uuid()], ARRAY[0])`,
		"rewrite outbox rows":   `UPDATE etl_outbox_events SET event_kind = 'job_lifecycle'`,
		"read the claim queue":  `SELECT * FROM etl_job_claim_queue`,
		"read the ledger":       `SELECT * FROM etl_idempotency_records`,
		"write the target":      `INSERT INTO processed_data (data, normalized_record) VALUES ('x', '{}')`,
		"draw a fencing token":  `SELECT nextval('etl_lease_fencing_token_sequence')`,
		"cancel through the fn": `SELECT * FROM etl_cancel_job(gen_random_uuid(), repeat('0', 64), repeat('0', 64))`,
	}
	for k, v := range appRoleDenials {
		denied[k] = v
	}
	assertDenied(t, rp, "mightyetl_relay_role", denied)
}

// The migrator role owns the schema: it migrates down and up again, and it
// can create neither databases nor roles.
func TestMigratorRoleMigratesAndNothingMore(t *testing.T) {
	// A migrator role someone gave CREATEDB: the script takes it away.
	_, url := grantsSetup(t, `DO $$ BEGIN
		IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mightyetl_migrator_role') THEN
			ALTER ROLE mightyetl_migrator_role CREATEDB;
		END IF; END $$`)
	ctx := context.Background()
	mp := rolePool(t, url, "mightyetl_migrator_role")
	if err := pg.MigrateTo(ctx, mp, 8); err != nil {
		t.Fatalf("migrate down to 00008 as migrator: %v", err)
	}
	if err := pg.Migrate(ctx, mp); err != nil {
		t.Fatalf("migrate up as migrator: %v", err)
	}
	if _, err := mp.Exec(ctx, `CREATE TABLE etl_migrator_probe (x int); DROP TABLE etl_migrator_probe`); err != nil {
		t.Fatalf("create a table in public as migrator: %v", err)
	}
	var createdb, createrole, super bool
	if err := mp.QueryRow(ctx, `SELECT rolcreatedb, rolcreaterole, rolsuper FROM pg_roles WHERE rolname = current_user`).
		Scan(&createdb, &createrole, &super); err != nil || createdb || createrole || super {
		t.Fatalf("migrator attributes: createdb %v, createrole %v, superuser %v, %v", createdb, createrole, super, err)
	}
	for name, stmt := range map[string]string{
		"create a database": `CREATE DATABASE mightyetl_migrator_forbidden`,
		"create a role":     `CREATE ROLE mightyetl_migrator_forbidden`,
	} {
		if _, err := mp.Exec(ctx, stmt); !isInsufficientPrivilege(err) {
			t.Errorf("%s as migrator: %v, want insufficient_privilege", name, err)
		}
	}
}

// TestGrantScriptRevokesCreateOnPublicFromPUBLIC: PUBLIC, and so any role
// at all, cannot create objects in schema public, even in a database where
// it could (PostgreSQL 14 and older by default, or a template that grants it).
func TestGrantScriptRevokesCreateOnPublicFromPUBLIC(t *testing.T) {
	admin, url := grantsSetup(t, `GRANT CREATE ON SCHEMA public TO PUBLIC`)
	assertDenied(t, rolePool(t, url, "mightyetl_worker_role"), "mightyetl_worker_role", appRoleDenials)
	var publicCreate bool
	if err := admin.QueryRow(context.Background(),
		`SELECT has_schema_privilege('public', 'public', 'CREATE')`).Scan(&publicCreate); err != nil {
		t.Fatal(err)
	}
	if publicCreate {
		t.Fatal("PUBLIC may create in schema public")
	}
}
