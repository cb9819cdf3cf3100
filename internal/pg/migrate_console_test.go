package pg_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// migConsoleFunctions are the functions migration 00010 creates.
var migConsoleFunctions = []string{
	"etl_operator_cancel_job", "etl_ops_job_private", "etl_ops_active_jobs", "etl_ops_counters", "etl_ops_outbox_backlog",
}

// Migration 00010 (operator console) down refuses while an operator's
// cancellation exists, leaving everything in place; once that row is gone
// it removes its functions, the outbox actor column and the operator's
// cancellation code (an owner's CANCELLED row does not block it), and up
// restores them all.
func TestMigration00010DownRefusesWithOperatorCancelledRowsAndReverts(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	if err := pg.MigrateTo(ctx, pool, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, migCancelledRowSQL(10)); err != nil {
		t.Fatalf("insert an owner's CANCELLED row: %v", err)
	}
	// By SQL of version 10 (hex text digests): the product's InsertJobs
	// speaks the newest schema.
	id := migInsertJob(t, pool, pgtest.SHA("mig-10-owner"), `[{"id":"m10"}]`)
	// By the function of version 10: the product's OperatorCancelJob also
	// writes the audit of 00020.
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_operator_cancel_job($1, $2, $3)`,
		id, pgtest.SHA("mig-10-operator"), pgtest.SHA("mig-10-cancel")); n != 1 {
		t.Fatalf("operator cancel at 00010: %d jobs cancelled, want 1", n)
	}

	err := pg.MigrateTo(ctx, pool, 9)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55006" || !strings.Contains(err.Error(), "operator-cancelled jobs exist") {
		t.Fatalf("down from 00010 with an operator's cancellation: %v, want object_in_use naming why", err)
	}
	if applied, _ := migVersion(t, pool); applied != 10 {
		t.Fatalf("applied %d after a refused down, want 10", applied)
	}
	for _, fn := range migConsoleFunctions {
		if !migFunctionExists(t, pool, fn) {
			t.Errorf("function %s dropped by a refused down migration", fn)
		}
	}
	if !migColumnExists(t, pool, "etl_outbox_events", "actor_principal_scope_hash") {
		t.Error("actor_principal_scope_hash dropped by a refused down migration")
	}

	if _, err := pool.Exec(ctx, `DELETE FROM etl_job_records WHERE cancellation_code = 'etl_job_cancelled_by_operator'`); err != nil {
		t.Fatal(err)
	}
	if err := pg.MigrateTo(ctx, pool, 9); err != nil {
		t.Fatalf("down from 00010 without operator cancellations: %v", err)
	}
	if applied, _ := migVersion(t, pool); applied != 9 {
		t.Fatalf("applied %d, want 9", applied)
	}
	for _, fn := range migConsoleFunctions {
		if migFunctionExists(t, pool, fn) {
			t.Errorf("function %s left after down from 00010", fn)
		}
	}
	if migColumnExists(t, pool, "etl_outbox_events", "actor_principal_scope_hash") {
		t.Error("actor_principal_scope_hash left after down from 00010")
	}
	_, err = pool.Exec(ctx, `UPDATE etl_job_records SET cancellation_code = 'etl_job_cancelled_by_operator' WHERE job_status = 'CANCELLED'`)
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Fatalf("operator's code at 00009: %v, want check_violation", err)
	}

	migUp(t, pool)
	if applied, expected := migVersion(t, pool); applied != expected {
		t.Fatalf("applied %d after up, want %d", applied, expected)
	}
	for _, fn := range migConsoleFunctions {
		if !migFunctionExists(t, pool, fn) {
			t.Errorf("function %s missing after up", fn)
		}
	}
	id = pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: pgtest.SHA("mig-10-owner"), Payload: `[{"id":"m10b"}]`})[0]
	if out, err := pg.OperatorCancelJob(ctx, pool, pg.OperatorCancelParams{JobID: id, OperatorScopeHash: pgtest.SHA("mig-10-operator"),
		CancellationKeyHash: pgtest.SHA("mig-10-cancel-2")}); err != nil || !out.Cancelled {
		t.Fatalf("operator cancel after up: %+v, %v", out, err)
	}
	var actor string
	if err := pool.QueryRow(ctx, `SELECT actor_principal_scope_hash FROM etl_outbox_events
		WHERE event_kind = 'job_lifecycle' AND actor_principal_scope_hash IS NOT NULL`).Scan(&actor); err != nil || actor != pgtest.SHA("mig-10-operator") {
		t.Fatalf("operator's hash on the outbox after up: %q, %v", actor, err)
	}
}

// Migration 00011 (operator replay) down drops etl_operator_replay_job and
// leaves the jobs it created (ordinary replay jobs of their source's owner)
// intact; up restores the function, and a repeat of the earlier request
// finds the same job (through the bytea digests of 00014, converted from the
// hex text the replay stored at 00011).
func TestMigration00011DownAndUp(t *testing.T) {
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	if err := pg.MigrateTo(ctx, pool, 11); err != nil {
		t.Fatal(err)
	}
	const payload = `[{"id":"m11"}]`
	// By SQL of version 11 (hex text digests): the product's InsertJobs
	// speaks the newest schema.
	source := migInsertJob(t, pool, pgtest.SHA("mig-11-owner"), payload)
	if _, err := pool.Exec(ctx, `DELETE FROM etl_job_claim_queue WHERE job_record_id = $1`, source); err != nil {
		t.Fatal(err)
	}
	setTerminal(t, pool, source, pg.StatusFailed)
	p := pg.OperatorReplayParams{SourceJobID: source, OperatorScopeHash: pgtest.SHA("mig-11-operator"),
		ReplayKeyHash: pgtest.SHA("mig-11-key"), RequestDigest: pgtest.SHA(payload), Payload: payload}
	// By the function of version 11: the product's OperatorReplayJob also
	// writes the audit of 00020.
	outcome, firstID, err := migOperatorReplay(t, pool, p)
	if err != nil || outcome != "created" {
		t.Fatalf("operator replay at 00011: %s, %v", outcome, err)
	}

	if err := pg.MigrateTo(ctx, pool, 10); err != nil {
		t.Fatalf("down from 00011: %v", err)
	}
	if applied, _ := migVersion(t, pool); applied != 10 {
		t.Fatalf("applied %d, want 10", applied)
	}
	if migFunctionExists(t, pool, "etl_operator_replay_job") {
		t.Fatal("etl_operator_replay_job left after down from 00011")
	}
	if _, _, err := migOperatorReplay(t, pool, p); pgCode(err) != "42883" {
		t.Fatalf("operator replay without its function: %v, want undefined_function", err)
	}
	// The owner's read of version 10 (pg.GetJob reads the newest schema).
	var lineageSource uuid.UUID
	var digest string
	if err := pool.QueryRow(ctx, `SELECT replay_source_job_record_id, request_digest FROM etl_job_records
		WHERE job_record_id = $1 AND principal_scope_hash = $2`, firstID, pgtest.SHA("mig-11-owner")).
		Scan(&lineageSource, &digest); err != nil || lineageSource != source || digest != pgtest.SHA(payload) {
		t.Fatalf("the replay job after down: source %v digest %s, %v", lineageSource, digest, err)
	}

	migUp(t, pool)
	if !migFunctionExists(t, pool, "etl_operator_replay_job") {
		t.Fatal("etl_operator_replay_job missing after up")
	}
	again, err := pg.OperatorReplayJob(ctx, pool, p)
	if err != nil || again.Created || again.Job.JobID != firstID || again.Job.RequestDigest != pgtest.SHA(payload) {
		t.Fatalf("repeat after up: %+v, %v", again, err)
	}
	if got, err := pg.GetJob(ctx, pool, pgtest.SHA("mig-11-owner"), firstID); err != nil || got.Lineage == nil ||
		got.Lineage.SourceJobID != source {
		t.Fatalf("the replay job after up: %+v, %v", got, err)
	}
}

// migOperatorReplay runs etl_operator_replay_job with p directly (any schema
// version from 00011 on; the product's OperatorReplayJob speaks the newest
// schema, which writes the operator audit of 00020) and returns the
// function's outcome and job id (uuid.Nil for a refusal).
func migOperatorReplay(t *testing.T, pool pg.DBTX, p pg.OperatorReplayParams) (string, uuid.UUID, error) {
	t.Helper()
	var outcome string
	var job *uuid.UUID
	err := pool.QueryRow(context.Background(), `SELECT outcome, job_record_id FROM etl_operator_replay_job($1, $2, $3, $4, $5, $6)`,
		p.SourceJobID, p.OperatorScopeHash, p.ReplayKeyHash, p.RequestDigest, p.Payload, uuid.Must(uuid.NewV7())).Scan(&outcome, &job)
	if job == nil {
		return outcome, uuid.Nil, err
	}
	return outcome, *job, err
}
