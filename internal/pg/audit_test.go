package pg_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// auditRow is one etl_operator_audit_records row as the tests read it.
type auditRow struct {
	Operator string
	Action   string
	JobID    *uuid.UUID
	ReplayID *uuid.UUID
	Filter   *string
	Count    *int
	Outcome  string
}

// auditRows reads every audit row, oldest first, with the full hex hash.
func auditRows(t *testing.T, db pg.DBTX) []auditRow {
	t.Helper()
	rows, err := db.Query(context.Background(), `
		SELECT encode(operator_principal_scope_hash, 'hex'), operator_action, job_record_id, replay_job_record_id,
		       bulk_filter::text, job_count, outcome_code
		FROM etl_operator_audit_records ORDER BY audit_record_id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (auditRow, error) {
		var a auditRow
		err := r.Scan(&a.Operator, &a.Action, &a.JobID, &a.ReplayID, &a.Filter, &a.Count, &a.Outcome)
		return a, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Each operator action writes exactly one audit row, in the action's
// statement: a cancellation ('ok'), a cancellation that found nothing to
// do (the code of why), a replay (created, found again, refused) and a bulk
// cancellation (one row with its filter and the number cancelled).
func TestOperatorActionsWriteOneAuditRowEach(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	op := pgtest.SHA("audit-operator")
	owner := pgtest.SHA("audit-owner")
	cancel := func(id uuid.UUID) (pg.CancelOutcome, error) {
		return pg.OperatorCancelJob(ctx, pool, pg.OperatorCancelParams{JobID: id, OperatorScopeHash: op,
			CancellationKeyHash: pgtest.SHA("audit-cancel-" + id.String())})
	}
	want := []auditRow{}
	check := func(step string) {
		t.Helper()
		got := auditRows(t, pool)
		if len(got) != len(want) {
			t.Fatalf("%s: %d audit rows, want %d: %+v", step, len(got), len(want), got)
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Operator != op || g.Action != w.Action || g.Outcome != w.Outcome ||
				!eqUUID(g.JobID, w.JobID) || !eqUUID(g.ReplayID, w.ReplayID) || !eqInt(g.Count, w.Count) ||
				(g.Filter == nil) != (w.Filter == nil) {
				t.Fatalf("%s: row %d = %+v, want %+v", step, i, g, w)
			}
		}
	}

	const payload = `[{"id":"a1"}]`
	jobs := pgtest.InsertJobs(t, pool,
		pg.NewJob{PrincipalScopeHash: owner, Payload: payload},
		pg.NewJob{PrincipalScopeHash: owner, Payload: `[{"id":"a2"}]`})
	if out, err := cancel(jobs[0]); err != nil || !out.Cancelled {
		t.Fatalf("operator cancel: %+v, %v", out, err)
	}
	want = append(want, auditRow{Action: pg.AuditActionCancel, JobID: &jobs[0], Outcome: pg.AuditOutcomeOK})
	check("cancel")

	if out, err := cancel(jobs[0]); err != nil || out.Cancelled {
		t.Fatalf("repeated operator cancel: %+v, %v", out, err)
	}
	want = append(want, auditRow{Action: pg.AuditActionCancel, JobID: &jobs[0], Outcome: codes.CancelledByOperator})
	setTerminal(t, pool, jobs[1], pg.StatusSucceeded)
	if out, err := cancel(jobs[1]); err != nil || out.Cancelled {
		t.Fatalf("operator cancel of a succeeded job: %+v, %v", out, err)
	}
	want = append(want, auditRow{Action: pg.AuditActionCancel, JobID: &jobs[1], Outcome: codes.AlreadySucceeded})
	absent := uuid.New()
	if _, err := cancel(absent); !errors.Is(err, pg.ErrNotFound) {
		t.Fatalf("operator cancel of an absent job: %v, want ErrNotFound", err)
	}
	want = append(want, auditRow{Action: pg.AuditActionCancel, JobID: &absent, Outcome: codes.JobNotFound})
	check("cancels that did nothing")

	replay := pg.OperatorReplayParams{SourceJobID: jobs[0], OperatorScopeHash: op, ReplayKeyHash: pgtest.SHA("audit-replay"),
		RequestDigest: pgtest.SHA(payload), Payload: payload}
	first, err := pg.OperatorReplayJob(ctx, pool, replay)
	if err != nil || !first.Created {
		t.Fatalf("operator replay: %+v, %v", first, err)
	}
	want = append(want, auditRow{Action: pg.AuditActionReplay, JobID: &jobs[0], ReplayID: &first.Job.JobID, Outcome: pg.AuditOutcomeOK})
	again, err := pg.OperatorReplayJob(ctx, pool, replay)
	if err != nil || again.Created || again.Job.JobID != first.Job.JobID {
		t.Fatalf("repeated operator replay: %+v, %v", again, err)
	}
	want = append(want, auditRow{Action: pg.AuditActionReplay, JobID: &jobs[0], ReplayID: &first.Job.JobID, Outcome: pg.AuditOutcomeOK})
	mismatch := replay
	mismatch.ReplayKeyHash, mismatch.RequestDigest = pgtest.SHA("audit-replay-2"), pgtest.SHA("other body")
	if _, err := pg.OperatorReplayJob(ctx, pool, mismatch); !errors.Is(err, pg.ErrReplayPayloadMismatch) {
		t.Fatalf("operator replay with another body: %v", err)
	}
	want = append(want, auditRow{Action: pg.AuditActionReplay, JobID: &jobs[0], Outcome: codes.ReplayPayloadMismatch})
	check("replays")

	// Bulk: two active jobs and one already cancelled; two are cancelled.
	bulk := pgtest.InsertN(t, pool, 2, pg.NewJob{PrincipalScopeHash: owner, Payload: `[{"id":"b"}]`})
	ids := append(bulk, jobs[0])
	keys := []string{pgtest.SHA("bk1"), pgtest.SHA("bk2"), pgtest.SHA("bk3")}
	n, err := pg.OperatorBulkCancelJobs(ctx, pool, pg.OperatorBulkCancelParams{JobIDs: ids, CancellationKeyHashes: keys,
		OperatorScopeHash: op, Filter: json.RawMessage(`{"state":"PENDING","confirmed":3}`)})
	if err != nil || n != 2 {
		t.Fatalf("bulk cancel: %d, %v; want 2", n, err)
	}
	two, filter := 2, "{}"
	want = append(want, auditRow{Action: pg.AuditActionBulkCancel, Count: &two, Filter: &filter, Outcome: pg.AuditOutcomeOK})
	check("bulk cancel")
	var stored string
	if err := pool.QueryRow(ctx, `SELECT bulk_filter::text FROM etl_operator_audit_records WHERE operator_action = 'bulk_cancel'`).
		Scan(&stored); err != nil || stored != `{"state": "PENDING", "confirmed": 3}` {
		t.Fatalf("bulk filter = %s, %v", stored, err)
	}
	for _, id := range bulk {
		if s := jobStatus(t, pool, id); s != pg.StatusCancelled {
			t.Fatalf("bulk-cancelled job is %s", s)
		}
	}
}

func eqUUID(a, b *uuid.UUID) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}
func eqInt(a, b *int) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func jobStatus(t *testing.T, db pg.DBTX, id uuid.UUID) string {
	t.Helper()
	var s string
	if err := db.QueryRow(context.Background(), `SELECT job_status FROM etl_job_records WHERE job_record_id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// An action that fails or rolls back leaves no audit row, and an audit row
// never outlives its action: a cancellation rolled back with its
// transaction, and a bulk cancellation whose audit row is refused (a filter
// member outside the fixed set) cancels nothing.
func TestOperatorActionRolledBackWritesNoAuditRow(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	op := pgtest.SHA("audit-rollback-operator")
	jobs := pgtest.InsertN(t, pool, 2, pg.NewJob{PrincipalScopeHash: pgtest.SHA("audit-rollback-owner"), Payload: `[{"id":"r"}]`})

	errRollback := errors.New("roll back")
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		out, err := pg.OperatorCancelJob(ctx, tx, pg.OperatorCancelParams{JobID: jobs[0], OperatorScopeHash: op,
			CancellationKeyHash: pgtest.SHA("rb")})
		if err != nil || !out.Cancelled {
			t.Errorf("cancel in a transaction: %+v, %v", out, err)
		}
		if n := len(auditRows(t, tx)); n != 1 {
			t.Errorf("audit rows inside the transaction: %d, want 1", n)
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	if n := len(auditRows(t, pool)); n != 0 {
		t.Fatalf("audit rows after rollback: %d, want 0", n)
	}
	if s := jobStatus(t, pool, jobs[0]); s != pg.StatusPending {
		t.Fatalf("job after a rolled-back cancel: %s", s)
	}

	_, err = pg.OperatorBulkCancelJobs(ctx, pool, pg.OperatorBulkCancelParams{JobIDs: jobs,
		CancellationKeyHashes: []string{pgtest.SHA("b1"), pgtest.SHA("b2")}, OperatorScopeHash: op,
		Filter: json.RawMessage(`{"state":"PENDING","payload":"secret"}`)})
	if pgCode(err) != "23514" {
		t.Fatalf("bulk cancel with a payload in its filter: %v, want check_violation", err)
	}
	if n := len(auditRows(t, pool)); n != 0 {
		t.Fatalf("audit rows after a failed bulk cancel: %d, want 0", n)
	}
	for _, id := range jobs {
		if s := jobStatus(t, pool, id); s != pg.StatusPending {
			t.Fatalf("job after a failed bulk cancel: %s, want PENDING (rolled back with its audit row)", s)
		}
	}
}

// The audit lists newest first, a page at a time: following Next visits
// every row once, in descending id order, and the last page has no Next.
func TestListOperatorAuditNewestFirstWithKeyset(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	op := pgtest.SHA("audit-list-operator")
	var acted []uuid.UUID
	for i := 0; i < 5; i++ {
		id := uuid.New()
		if _, err := pg.OperatorCancelJob(ctx, pool, pg.OperatorCancelParams{JobID: id, OperatorScopeHash: op,
			CancellationKeyHash: pgtest.SHA(id.String())}); !errors.Is(err, pg.ErrNotFound) {
			t.Fatal(err)
		}
		acted = append(acted, id)
	}
	if _, err := pg.ListOperatorAudit(ctx, pool, pg.AuditListParams{Limit: 0}); err == nil {
		t.Fatal("limit 0 accepted")
	}
	var seen []pg.AuditRecord
	p := pg.AuditListParams{Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("the cursor does not advance")
		}
		page, err := pg.ListOperatorAudit(ctx, pool, p)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, page.Records...)
		if page.Next == 0 {
			break
		}
		p.Before = page.Next
	}
	if len(seen) != 5 {
		t.Fatalf("listed %d records, want 5", len(seen))
	}
	for i, r := range seen {
		if r.JobID == nil || *r.JobID != acted[4-i] || r.Action != pg.AuditActionCancel || r.Outcome != codes.JobNotFound ||
			r.Operator != op[:pg.OpsOwnerPrefixLen] || r.CreatedAt.IsZero() || r.Filter != nil || r.JobCount != nil {
			t.Fatalf("record %d = %+v", i, r)
		}
		if i > 0 && r.ID >= seen[i-1].ID {
			t.Fatalf("record %d id %d not below %d", i, r.ID, seen[i-1].ID)
		}
	}
}

// ageAudit moves every audit row of job id back by d, past the append-only
// trigger (a superuser session with triggers off, in one transaction).
func ageAudit(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, d time.Duration) {
	t.Helper()
	if err := pg.WithTx(context.Background(), pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(), `UPDATE etl_operator_audit_records
			SET created_at = created_at - $2::bigint * interval '1 microsecond' WHERE job_record_id = $1`, id, d.Microseconds())
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// Prune deletes audit rows older than its window only, in batches; the
// table refuses every UPDATE, even the owner's.
func TestPruneOperatorAudit(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	op := pgtest.SHA("audit-prune-operator")
	var young []uuid.UUID
	for i := 0; i < 5; i++ {
		id := uuid.New()
		if _, err := pg.OperatorCancelJob(ctx, pool, pg.OperatorCancelParams{JobID: id, OperatorScopeHash: op,
			CancellationKeyHash: pgtest.SHA(id.String())}); !errors.Is(err, pg.ErrNotFound) {
			t.Fatal(err)
		}
		if i < 3 {
			ageAudit(t, pool, id, 91*24*time.Hour)
		} else {
			ageAudit(t, pool, id, 89*24*time.Hour)
			young = append(young, id)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE etl_operator_audit_records SET outcome_code = 'ok'`); pgCode(err) != "42501" {
		t.Fatalf("update of the audit: %v, want the append-only trigger's 42501", err)
	}
	if _, err := pg.PruneOperatorAudit(ctx, pool, 0, 10); err == nil {
		t.Fatal("a zero window accepted")
	}
	n, err := pg.PruneOperatorAudit(ctx, pool, 90*24*time.Hour, 2)
	if err != nil || n != 3 {
		t.Fatalf("pruned %d, %v; want 3", n, err)
	}
	left := auditRows(t, pool)
	if len(left) != 2 || *left[0].JobID != young[0] || *left[1].JobID != young[1] {
		t.Fatalf("left after prune: %+v, want the rows of %v", left, young)
	}
	if n, err := pg.PruneOperatorAudit(ctx, pool, 90*24*time.Hour, 2); err != nil || n != 0 {
		t.Fatalf("second prune: %d, %v", n, err)
	}
}

// Migration 00020 down drops the audit table and its trigger function (the
// operator actions then fail: their statements write the audit), and up
// restores them.
func TestMigration00020DownAndUp(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	migUp(t, pool)
	id := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: pgtest.SHA("mig-20-owner"), Payload: `[{"id":"m20"}]`})[0]
	params := pg.OperatorCancelParams{JobID: id, OperatorScopeHash: pgtest.SHA("mig-20-operator"), CancellationKeyHash: pgtest.SHA("mig-20")}
	if out, err := pg.OperatorCancelJob(ctx, pool, params); err != nil || !out.Cancelled {
		t.Fatalf("operator cancel at 00020: %+v, %v", out, err)
	}
	if err := pg.MigrateTo(ctx, pool, 19); err != nil {
		t.Fatalf("down from 00020: %v", err)
	}
	if applied := migApplied(t, pool); applied >= 20 {
		t.Fatalf("applied %d after down, want below 20", applied)
	}
	if migRelationExists(t, pool, "etl_operator_audit_records") || migFunctionExists(t, pool, "etl_operator_audit_refuse_update") {
		t.Fatal("audit table or trigger function left after down from 00020")
	}
	if _, err := pg.OperatorCancelJob(ctx, pool, params); err == nil {
		t.Fatal("operator cancel without the audit table succeeded")
	}
	if s := jobStatus(t, pool, id); s != pg.StatusCancelled {
		t.Fatalf("job after down: %s", s)
	}
	migUp(t, pool)
	if !migRelationExists(t, pool, "etl_operator_audit_records") || !migConstraintExists(t, pool, "etl_operator_audit_shape_check") {
		t.Fatal("audit table missing after up")
	}
	if out, err := pg.OperatorCancelJob(ctx, pool, params); err != nil || out.Cancelled {
		t.Fatalf("operator cancel after up: %+v, %v", out, err)
	}
	if rows := auditRows(t, pool); len(rows) != 1 || rows[0].Outcome != codes.CancelledByOperator {
		t.Fatalf("audit after up: %+v", rows)
	}
}

// The intake role writes the audit only through the operator's actions and
// reads it; it can neither rewrite nor delete a row, nor choose its id or
// time.
func TestIntakeRoleAppendsToTheAuditAndNothingMore(t *testing.T) {
	t.Parallel()
	admin, url := grantsSetup(t)
	ctx := context.Background()
	ip := rolePool(t, url, "mightyetl_intake_role")
	op := pgtest.SHA("grant-audit-operator")
	jobs := pgtest.InsertN(t, admin, 3, pg.NewJob{PrincipalScopeHash: pgtest.SHA("grant-audit-owner"), Payload: `[{"id":"g"}]`})
	if out, err := pg.OperatorCancelJob(ctx, ip, pg.OperatorCancelParams{JobID: jobs[0], OperatorScopeHash: op,
		CancellationKeyHash: pgtest.SHA("g0")}); err != nil || !out.Cancelled {
		t.Fatalf("operator cancel as intake: %+v, %v", out, err)
	}
	if _, err := pg.OperatorCancelJob(ctx, ip, pg.OperatorCancelParams{JobID: uuid.New(), OperatorScopeHash: op,
		CancellationKeyHash: pgtest.SHA("gx")}); !errors.Is(err, pg.ErrNotFound) {
		t.Fatalf("operator cancel of an absent job as intake: %v", err)
	}
	if n, err := pg.OperatorBulkCancelJobs(ctx, ip, pg.OperatorBulkCancelParams{JobIDs: jobs[1:],
		CancellationKeyHashes: []string{pgtest.SHA("g1"), pgtest.SHA("g2")}, OperatorScopeHash: op,
		Filter: json.RawMessage(`{"state":"PENDING"}`)}); err != nil || n != 2 {
		t.Fatalf("bulk cancel as intake: %d, %v", n, err)
	}
	const payload = `[{"id":"g"}]`
	if _, err := pg.OperatorReplayJob(ctx, ip, pg.OperatorReplayParams{SourceJobID: jobs[0], OperatorScopeHash: op,
		ReplayKeyHash: pgtest.SHA("gr"), RequestDigest: pgtest.SHA(payload), Payload: payload}); err != nil {
		t.Fatalf("operator replay as intake: %v", err)
	}
	page, err := pg.ListOperatorAudit(ctx, ip, pg.AuditListParams{Limit: 10})
	if err != nil || len(page.Records) != 4 {
		t.Fatalf("audit list as intake: %+v, %v", page, err)
	}
	assertDenied(t, ip, "mightyetl_intake_role", map[string]string{
		"update the audit":   `UPDATE etl_operator_audit_records SET outcome_code = 'ok'`,
		"delete the audit":   `DELETE FROM etl_operator_audit_records`,
		"truncate the audit": `TRUNCATE etl_operator_audit_records`,
		"choose the time": `INSERT INTO etl_operator_audit_records (operator_principal_scope_hash, operator_action,
			job_record_id, outcome_code, created_at) VALUES (decode(repeat('aa', 32), 'hex'), 'cancel', gen_random_uuid(), 'ok', '2000-01-01')`,
	})
	for _, role := range []string{"mightyetl_worker_role", "mightyetl_relay_role"} {
		assertDenied(t, rolePool(t, url, role), role, map[string]string{
			"read the audit":  `SELECT * FROM etl_operator_audit_records`,
			"write the audit": `INSERT INTO etl_operator_audit_records (operator_principal_scope_hash, operator_action, job_record_id, outcome_code) VALUES (decode(repeat('aa', 32), 'hex'), 'cancel', gen_random_uuid(), 'ok')`,
		})
	}
}
