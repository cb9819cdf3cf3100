package pg_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// grantedFunction is one function the grant script lets the intake role
// execute: how the intake's store calls it, and a direct call for the
// roles that must be refused.
type grantedFunction struct {
	// signature is the function as regprocedure prints it.
	signature string
	// asIntake runs the intake's store function that calls it, as the
	// intake role, and checks what it returned.
	asIntake func(t *testing.T, ip *pgxpool.Pool)
	// direct calls the function with harmless arguments.
	direct string
}

// functionGrants lists the functions of schema public that role may
// execute by an explicit grant, read from the catalog (EXECUTE entries of
// proacl naming role), so a new grant without a test here fails
// TestIntakeRoleRunsEveryGrantedFunction.
func functionGrants(t *testing.T, admin *pgxpool.Pool, role string) []string {
	t.Helper()
	rows, err := admin.Query(context.Background(), `
		SELECT p.oid::regprocedure::text
		FROM pg_proc p, aclexplode(p.proacl) a
		WHERE p.pronamespace = 'public'::regnamespace
		  AND a.grantee = $1::regrole AND a.privilege_type = 'EXECUTE'
		ORDER BY 1`, role)
	if err != nil {
		t.Fatal(err)
	}
	sigs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return sigs
}

// Every function the grant script grants to the intake role runs as the
// intake role, through the store function the intake calls (the owner's
// cancellation, the operator's cancellation and replay, the console's
// bounded reads), and is refused to the worker and relay roles, which hold no grant. The
// list is checked against the catalog both ways: a granted function that
// is not exercised here, or an exercised one that is not granted, fails.
// Every SECURITY DEFINER function is executable by the intake role alone
// (never by PUBLIC).
func TestIntakeRoleRunsEveryGrantedFunction(t *testing.T) {
	admin, url := grantsSetup(t)
	ctx := context.Background()
	ip := rolePool(t, url, "mightyetl_intake_role")
	owner, operator := pgtest.SHA("fn-owner"), pgtest.SHA("fn-operator")

	// Four PENDING jobs of one owner (inserted as the intake); the admin,
	// standing in for a worker, claims the oldest, so jobs[0] is RUNNING.
	var jobs []uuid.UUID
	for i := range 4 {
		payload := `[{"id":"fn` + string(rune('0'+i)) + `"}]`
		ins, err := pg.InsertJobs(ctx, ip, []pg.NewJob{{Kind: pg.KindETLRecords, PrincipalScopeHash: owner,
			SubmissionKeyHash: pgtest.SHA("fn-key-" + payload), RequestDigest: pgtest.SHA(payload), Payload: payload, MaxAttempts: 2}})
		if err != nil {
			t.Fatalf("submit as intake: %v", err)
		}
		jobs = append(jobs, ins[0].JobID)
	}
	if err := pg.WithTx(ctx, admin, func(tx pgx.Tx) error {
		res, err := lease.ClaimJobs(ctx, tx, lease.ClaimParams{OwnerID: "fn-grant-worker", Limit: 1, LeaseDuration: time.Minute})
		if err == nil && (len(res.Claimed) != 1 || res.Claimed[0].JobID != jobs[0]) {
			t.Fatalf("claimed %+v, want %v", res.Claimed, jobs[0])
		}
		return err
	}); err != nil {
		t.Fatalf("claim: %v", err)
	}
	running, pending, ownerCancelled, operatorCancelled := jobs[0], jobs[1], jobs[2], jobs[3]
	ownerCancelledPayload := `[{"id":"fn2"}]`

	// In call order: the reads see the RUNNING job before it is cancelled.
	functions := []grantedFunction{
		{
			signature: "etl_ops_job_private(uuid)",
			direct:    `SELECT * FROM etl_ops_job_private(gen_random_uuid())`,
			asIntake: func(t *testing.T, ip *pgxpool.Pool) {
				d, err := pg.OpsJobDetail(ctx, ip, running)
				if err != nil || d.Status != pg.StatusRunning || d.LeaseOwnerID == nil || *d.LeaseOwnerID != "fn-grant-worker" ||
					d.LeaseExpiresAt == nil || d.LeaseFencingToken == nil || d.RecordCount == nil || *d.RecordCount != 1 ||
					d.DatabaseNow.IsZero() {
					t.Fatalf("job detail as intake: %+v, %v", d, err)
				}
			},
		},
		{
			signature: "etl_ops_active_jobs(integer)",
			direct:    `SELECT * FROM etl_ops_active_jobs(1)`,
			asIntake: func(t *testing.T, ip *pgxpool.Pool) {
				active, now, capped, err := pg.OpsActiveJobs(ctx, ip)
				if err != nil || capped || now.IsZero() || len(active) != 4 {
					t.Fatalf("active jobs as intake: %d, %v, %v, %v", len(active), now, capped, err)
				}
				for _, a := range active {
					if a.JobID == running && (a.Status != pg.StatusRunning || a.LeaseOwnerID == nil) {
						t.Fatalf("active running job as intake: %+v", a)
					}
				}
			},
		},
		{
			signature: "etl_ops_counters()",
			direct:    `SELECT * FROM etl_ops_counters()`,
			asIntake: func(t *testing.T, ip *pgxpool.Pool) {
				c, err := pg.ReadOpsCounters(ctx, ip)
				if err != nil || c.Claims < 1 || c.DatabaseNow.IsZero() {
					t.Fatalf("counters as intake: %+v, %v", c, err)
				}
			},
		},
		{
			signature: "etl_ops_outbox_backlog(integer)",
			direct:    `SELECT * FROM etl_ops_outbox_backlog(1)`,
			asIntake: func(t *testing.T, ip *pgxpool.Pool) {
				b, err := pg.ReadOutboxBacklog(ctx, ip, 100)
				if err != nil || b.Advisory < 1 {
					t.Fatalf("outbox backlog as intake: %+v, %v", b, err)
				}
			},
		},
		{
			signature: "etl_cancel_job(uuid,text,text)",
			direct:    `SELECT * FROM etl_cancel_job(gen_random_uuid(), repeat('0', 64), repeat('0', 64))`,
			asIntake: func(t *testing.T, ip *pgxpool.Pool) {
				out, err := pg.CancelJob(ctx, ip, pg.CancelParams{PrincipalScopeHash: owner, JobID: ownerCancelled,
					CancellationKeyHash: pgtest.SHA("fn-owner-cancel")})
				if err != nil || !out.Cancelled || out.PreviousStatus != pg.StatusPending {
					t.Fatalf("owner cancel as intake: %+v, %v", out, err)
				}
			},
		},
		{
			signature: "etl_operator_cancel_job(uuid,text,text)",
			direct:    `SELECT * FROM etl_operator_cancel_job(gen_random_uuid(), repeat('0', 64), repeat('0', 64))`,
			asIntake: func(t *testing.T, ip *pgxpool.Pool) {
				for id, previous := range map[uuid.UUID]string{running: pg.StatusRunning, operatorCancelled: pg.StatusPending} {
					out, err := pg.OperatorCancelJob(ctx, ip, pg.OperatorCancelParams{JobID: id, OperatorScopeHash: operator,
						CancellationKeyHash: pgtest.SHA("fn-operator-cancel-" + id.String())})
					if err != nil || !out.Cancelled || out.PreviousStatus != previous || out.Job.CancellationCode == nil ||
						*out.Job.CancellationCode != codes.CancelledByOperator {
						t.Fatalf("operator cancel of a %s job as intake: %+v, %v", previous, out, err)
					}
				}
				out, err := pg.OperatorCancelJob(ctx, ip, pg.OperatorCancelParams{JobID: running, OperatorScopeHash: operator,
					CancellationKeyHash: pgtest.SHA("again")})
				if err != nil || out.Cancelled {
					t.Fatalf("repeated operator cancel as intake: %+v, %v", out, err)
				}
				// The operator's hash is on the lifecycle rows of both and
				// the revocation row of the RUNNING one, and nowhere else.
				var kinds []string
				rows, err := admin.Query(ctx, `SELECT event_kind FROM etl_outbox_events
					WHERE actor_principal_scope_hash = $1 ORDER BY 1`, operator)
				if err == nil {
					kinds, err = pgx.CollectRows(rows, pgx.RowTo[string])
				}
				if want := []string{"job_lifecycle", "job_lifecycle", "lease_revoked"}; err != nil || !slices.Equal(kinds, want) {
					t.Fatalf("outbox rows with the operator's hash: %v, %v; want %v", kinds, err, want)
				}
			},
		},
		{
			signature: "etl_operator_replay_job(uuid,text,text,text,text,uuid)",
			direct: `SELECT * FROM etl_operator_replay_job(gen_random_uuid(), repeat('0', 64), repeat('0', 64),
				repeat('0', 64), '[]', gen_random_uuid())`,
			asIntake: func(t *testing.T, ip *pgxpool.Pool) {
				// The owner's cancelled job (cancelled by the call above),
				// replayed by the operator for its owner.
				p := pg.OperatorReplayParams{SourceJobID: ownerCancelled, OperatorScopeHash: operator,
					ReplayKeyHash: pgtest.SHA("fn-operator-replay"), RequestDigest: pgtest.SHA(ownerCancelledPayload), Payload: ownerCancelledPayload}
				out, err := pg.OperatorReplayJob(ctx, ip, p)
				if err != nil || !out.Created || out.Job.Status != pg.StatusPending || out.Job.Lineage == nil ||
					out.Job.Lineage.SourceJobID != ownerCancelled {
					t.Fatalf("operator replay as intake: %+v, %v", out, err)
				}
				if got, err := pg.GetJob(ctx, ip, owner, out.Job.JobID); err != nil || got.Status != pg.StatusPending {
					t.Fatalf("the owner's replay job as intake: %+v, %v", got, err)
				}
				again, err := pg.OperatorReplayJob(ctx, ip, p)
				if err != nil || again.Created || again.Job.JobID != out.Job.JobID {
					t.Fatalf("repeated operator replay as intake: %+v, %v", again, err)
				}
				p.ReplayKeyHash, p.RequestDigest, p.Payload = pgtest.SHA("fn-operator-replay-2"), pgtest.SHA("[]"), "[]"
				if _, err := pg.OperatorReplayJob(ctx, ip, p); !errors.Is(err, pg.ErrReplayPayloadMismatch) {
					t.Fatalf("operator replay with another body as intake: %v", err)
				}
			},
		},
	}

	granted := functionGrants(t, admin, "mightyetl_intake_role")
	var exercised []string
	for _, f := range functions {
		exercised = append(exercised, f.signature)
	}
	slices.Sort(exercised)
	if !slices.Equal(granted, exercised) {
		t.Fatalf("functions granted to the intake role %v, exercised here %v: test every grant", granted, exercised)
	}

	for _, f := range functions {
		t.Run(f.signature, func(t *testing.T) { f.asIntake(t, ip) })
	}
	// The console's plain reads run as the intake role too.
	if page, err := pg.OpsListJobs(ctx, ip, pg.OpsListParams{Limit: 10}); err != nil || len(page.Jobs) != 5 {
		t.Fatalf("ops list as intake: %+v, %v", page, err)
	}
	if out, _, err := pg.OpsRecentOutcomes(ctx, ip, time.Now().Add(-time.Hour), 100); err != nil || len(out) == 0 {
		t.Fatalf("recent outcomes as intake: %+v, %v", out, err)
	}
	if d, err := pg.OpsJobDetail(ctx, ip, pending); err != nil || d.Status != pg.StatusPending {
		t.Fatalf("detail of the untouched job as intake: %+v, %v", d, err)
	}

	// No other role holds a grant: each call is refused to the worker and
	// relay roles, and no SECURITY DEFINER function is PUBLIC's.
	for _, role := range []string{"mightyetl_worker_role", "mightyetl_relay_role"} {
		if got := functionGrants(t, admin, role); len(got) != 0 {
			t.Errorf("functions granted to %s: %v", role, got)
		}
		denied := map[string]string{}
		for _, f := range functions {
			denied["call "+f.signature] = f.direct
		}
		assertDenied(t, rolePool(t, url, role), role, denied)
	}
	var publicDefiners []string
	rows, err := admin.Query(ctx, `
		SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'public'::regnamespace AND p.prosecdef
		  AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a
		                                   WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'))
		ORDER BY 1`)
	if err == nil {
		publicDefiners, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(publicDefiners) != 0 {
		t.Fatalf("SECURITY DEFINER functions PUBLIC may execute: %v, %v", publicDefiners, err)
	}
}
