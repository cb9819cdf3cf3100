package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
	"github.com/mightyetl/mightyetl/internal/worker"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// heldPayload marks the diagnostic jobs heldHandlers keeps running.
const heldPayload = `{"held":true}`

// heldHandlers runs a diagnostic job whose payload is heldPayload until its
// context ends or the test sends on finish (one job per value), and any
// other at once.
func heldHandlers(finish <-chan struct{}) map[string]worker.Handler {
	return map[string]worker.Handler{
		pg.KindDiagnostic: func(ctx context.Context, c *lease.Claim) (worker.Output, error) {
			if c.Payload != heldPayload {
				return worker.Output{}, nil
			}
			select {
			case <-ctx.Done():
				return worker.Output{}, context.Cause(ctx)
			case <-finish:
				return worker.Output{}, nil
			}
		},
	}
}

// wakeupConfig is a worker of two regular slots and one wake-up slot that
// claims only when told to (no poll, no chunked jobs).
func wakeupConfig(owner string) worker.Config {
	cfg := fastConfig()
	cfg.OwnerID = owner
	cfg.Concurrency, cfg.WakeupSlots, cfg.ChunkedSlots = 2, 1, -1
	cfg.PollInterval = time.Hour
	return cfg
}

// countJobs counts owner's jobs in status.
func countJobs(t *testing.T, db pg.DBTX, owner, status string) int {
	t.Helper()
	return pgtest.Count(t, db, `SELECT count(*) FROM etl_job_records WHERE principal_scope_hash = decode($1, 'hex') AND job_status = $2`,
		owner, status)
}

// With every regular slot busy on owner A's long jobs and more of A's
// queued, a wake-up for owner B's new job gets B's job claimed at once on
// the wake-up slot, and none of A's; the regular claims never use the
// wake-up slot, busy or free: they take two of A's jobs, and one more when
// one of them finishes.
func TestWakeupSlotTakesALightOwnersJobBesideABusyBacklog(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	a, b := pgtest.SHA("wakeup-owner-a"), pgtest.SHA("wakeup-owner-b")
	// More than the arrivals claim's window: A's oldest jobs are older than
	// it, A is no light owner.
	pgtest.InsertN(t, pool, lease.ArrivalsWindow+20, pg.NewJob{Kind: pg.KindDiagnostic, Payload: heldPayload, PrincipalScopeHash: a})
	finish := make(chan struct{})
	h := newWorkerWith(t, url, wakeupConfig("wakeup-busy-worker"), worker.TestHooks{}, harnessOptions{handlers: heldHandlers(finish)})
	h.start(t)
	if n := receive(t, 30*time.Second, "no first claim", h.sig.Claimed); n != 2 {
		t.Fatalf("the first claim took %d of A's jobs, want the 2 regular slots' worth", n)
	}
	if n := countJobs(t, pool, a, pg.StatusRunning); n != 2 {
		t.Fatalf("%d of A's jobs running, want 2", n)
	}

	ids := pgtest.InsertN(t, pool, 1, pg.NewJob{Kind: pg.KindDiagnostic, Payload: `{}`, PrincipalScopeHash: b})
	h.w.Wake()
	if n := receive(t, 30*time.Second, "no arrivals claim after the wake-up", h.sig.Arrivals); n != 1 {
		t.Fatalf("the arrivals claim took %d jobs, want B's", n)
	}
	h.awaitOutcome(t, 30*time.Second, "B's job succeeded", metrics.OutcomeSucceeded, 1)
	wantJob(t, pool, ids[0], pg.StatusSucceeded, 1)
	if n := countJobs(t, pool, a, pg.StatusRunning); n != 2 {
		t.Fatalf("%d of A's jobs running after the wake-up, want 2", n)
	}
	if v := testutil.ToFloat64(h.m.WakeupJobs); v != 1 {
		t.Fatalf("wake-up slot jobs %v, want 1", v)
	}

	// The wake-up slot is free again; a wake-up with A's backlog alone
	// leaves it free.
	h.w.Wake()
	if n := receive(t, 30*time.Second, "no arrivals claim after the second wake-up", h.sig.Arrivals); n != 0 {
		t.Fatalf("the arrivals claim took %d of A's backlog, want none", n)
	}
	// One of A's jobs finishes: its regular slot takes the next, and only
	// that one.
	finish <- struct{}{}
	h.awaitOutcome(t, 30*time.Second, "one of A's jobs succeeded", metrics.OutcomeSucceeded, 2)
	testwait.For(t, 30*time.Second, "the freed regular slot claimed", func() bool {
		return countJobs(t, pool, a, pg.StatusSucceeded) == 1 && countJobs(t, pool, a, pg.StatusPending) == lease.ArrivalsWindow+17
	})
	if n := countJobs(t, pool, a, pg.StatusRunning); n != 2 || h.w.Running() != 2 {
		t.Fatalf("%d of A's jobs running (%d handlers), want 2: the regular claims took the wake-up slot", n, h.w.Running())
	}
	if v := testutil.ToFloat64(h.m.WakeupJobs); v != 1 {
		t.Fatalf("wake-up slot jobs %v, want 1", v)
	}
}

// An idle worker takes a wake-up's job with its regular claim, in one
// statement: no arrivals claim runs.
func TestIdleWorkerTakesAWakeupsJobInOneClaim(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	h := newWorker(t, url, wakeupConfig("wakeup-idle-worker"), worker.TestHooks{})
	h.start(t)
	if n := receive(t, 30*time.Second, "no first claim", h.sig.Claimed); n != 0 {
		t.Fatalf("the first claim took %d jobs of an empty queue", n)
	}
	ids := pgtest.InsertN(t, pool, 1, pg.NewJob{Kind: pg.KindDiagnostic, Payload: `{}`})
	h.w.Wake()
	if n := receive(t, 30*time.Second, "no claim after the wake-up", h.sig.Claimed); n != 1 {
		t.Fatalf("the wake-up's claim took %d jobs, want 1", n)
	}
	h.awaitOutcome(t, 30*time.Second, "the job succeeded", metrics.OutcomeSucceeded, 1)
	wantJob(t, pool, ids[0], pg.StatusSucceeded, 1)
	if v := testutil.ToFloat64(h.m.WakeupClaims); v != 0 {
		t.Fatalf("%v arrivals claims on an idle worker, want 0", v)
	}
	select {
	case n := <-h.sig.Arrivals:
		t.Fatalf("an arrivals claim ran (%d jobs) on an idle worker", n)
	default:
	}
}

// Stop waits for an arrivals claim in flight: the claim, blocked behind a
// lock when Stop begins, still commits once the lock frees, its job is
// handed to the executors, which run or release it, and when Stop returns
// no claim statement runs and no job is left leased.
func TestStopWaitsForAnArrivalsClaim(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	a := pgtest.InsertN(t, pool, 1, pg.NewJob{Kind: pg.KindDiagnostic, Payload: heldPayload, PrincipalScopeHash: pgtest.SHA("stop-owner-a")})
	cfg := wakeupConfig("wakeup-stop-worker")
	cfg.Concurrency = 1
	cfg.StatementTimeout = time.Minute // only the lock's release ends the wait
	cfg.ShutdownGrace = 10 * time.Millisecond
	h := newWorkerWith(t, url, cfg, worker.TestHooks{}, harnessOptions{handlers: heldHandlers(nil)})
	h.start(t)
	testwait.For(t, 30*time.Second, "A's job running", func() bool { return h.w.Running() == 1 })

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE etl_job_claim_queue IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// Claimable with the lock's release: the blocked claim sees it.
	b := pgtest.InsertN(t, tx, 1, pg.NewJob{Kind: pg.KindDiagnostic, Payload: `{}`, PrincipalScopeHash: pgtest.SHA("stop-owner-b")})
	h.w.Wake()
	pgtest.WaitForLockWait(t, pool, "\nWITH recent AS (")

	// Begin the shutdown: Stop on an ended context returns at once and the
	// shutdown goes on.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := h.w.Stop(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop on an ended context returned %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := h.w.Stop(sctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case n := <-h.sig.Arrivals:
		if n != 1 {
			t.Fatalf("the arrivals claim took %d jobs, want B's", n)
		}
	default:
		t.Fatal("Stop returned before the arrivals claim did")
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND state <> 'idle' AND left(query, 17) = $1`, "\nWITH recent AS ("); n != 0 {
		t.Fatalf("%d arrivals claim statements still running after Stop", n)
	}
	for _, id := range []any{a[0], b[0]} {
		if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_record_id = $1 AND job_status = 'RUNNING'`, id); n != 0 {
			t.Fatalf("job %v left RUNNING after Stop", id)
		}
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}
