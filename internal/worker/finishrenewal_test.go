package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// Finish retries keep the lease (issue 29, defect 12). A job's handler
// succeeded; its finish fails transiently three times, each attempt holding
// the job row in its transaction for half the lease, so the retries outlast
// the lease the claim began with by the database clock. Renewal goes on
// for the finishing claim: while a finish transaction holds the row the
// renewal finds it busy and keeps trying, and it extends the lease as soon
// as the transaction rolled back, so the job ends SUCCEEDED on attempt 1.
// Before, the completer marked the claim finishing on every attempt and the
// renewer skipped it, so the lease lapsed and the job was run again.
//
// Once the last finish committed, and before the completer answered, a
// renewal round matches zero rows for the claim (it is still live and
// finishing): that is the finish ending the lease, neither a stale renewal
// nor a lost claim.
//
// The test runs every renewal round itself (RenewOnce; the scheduled
// interval is longer than the test) and holds each finish at exact points
// with hooks; the database raises the failures (serialization_failure for
// the first three target inserts, counted by a sequence across rollbacks).
func TestFinishRetriesKeepTheLeaseRenewed(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	const failures = 3
	if _, err := pool.Exec(ctx, `
CREATE SEQUENCE finish_target_calls;
CREATE FUNCTION failing_finish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('finish_target_calls') <= 3 THEN
        RAISE EXCEPTION 'target briefly unavailable' USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER failing_finish BEFORE INSERT ON processed_data
    FOR EACH ROW EXECUTE FUNCTION failing_finish();`); err != nil {
		t.Fatal(err)
	}
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(1, "finish-retried")})
	id := ids[0]

	// Each hook reports that it was reached, then waits for the test; abort
	// (closed when the test ends) lets a failed test's worker stop.
	abort := make(chan struct{})
	inTx, releaseTx := make(chan struct{}), make(chan struct{})
	failed, resume := make(chan struct{}), make(chan struct{})
	committed, answer := make(chan struct{}), make(chan struct{})
	hold := func(reached, proceed chan struct{}) func() {
		return func() {
			select {
			case reached <- struct{}{}:
			case <-abort:
				return
			}
			select {
			case <-proceed:
			case <-abort:
			}
		}
	}
	cfg := fastConfig()
	cfg.Concurrency = 1
	cfg.WakeupSlots = -1 // and no wake-up slot
	leaseDuration := 2 * time.Second
	cfg.LeaseDuration, cfg.SafetyMargin, cfg.StatementTimeout = leaseDuration, 400*time.Millisecond, time.Minute
	cfg.RenewInterval = 10 * time.Minute // no scheduled round: the test runs each one
	h := newWorker(t, url, cfg, worker.TestHooks{
		InFinishTx:        hold(inTx, releaseTx),
		WriteFailed:       hold(failed, resume),
		AfterFinishCommit: hold(committed, answer),
	})
	h.start(t)
	t.Cleanup(func() { close(abort) }) // runs before the worker's Stop

	expiry := func() (e time.Time) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT lease_expires_at FROM etl_job_records WHERE job_record_id = $1`, id).Scan(&e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	dbClockPast := func(at time.Time) bool {
		var past bool
		if err := pool.QueryRow(ctx, `SELECT clock_timestamp() > $1`, at).Scan(&past); err != nil {
			t.Fatal(err)
		}
		return past
	}

	var firstLease time.Time
	for attempt := 1; attempt <= failures; attempt++ {
		// The finish holds the job row in its transaction; the claim is
		// finishing.
		receive(t, 30*time.Second, "the finish did not start", inTx)
		before := expiry()
		if attempt == 1 {
			firstLease = before
		}
		renewed := make(chan struct{})
		go func() { h.w.RenewOnce(); close(renewed) }()
		select {
		case <-h.sig.RenewBusy:
			// The renewal tried the claim and found the row held: it keeps
			// trying, and never waits on the transaction.
		case <-renewed:
			t.Fatalf("attempt %d: the renewal round ended without trying the finishing claim", attempt)
		case <-time.After(30 * time.Second):
			t.Fatalf("attempt %d: the renewal round neither tried the claim nor ended", attempt)
		}
		// Half the lease passes on the database clock while the finish
		// holds the row.
		testwait.For(t, 10*time.Second, "half the lease passing on the database clock", func() bool {
			return dbClockPast(before.Add(-leaseDuration / 2))
		})
		releaseTx <- struct{}{}
		receive(t, 30*time.Second, "the finish did not fail", failed)
		receive(t, 30*time.Second, "the renewal did not end once the finish rolled back", renewed)
		if after := expiry(); !after.After(before) {
			t.Fatalf("attempt %d: lease %v not extended past %v while the finish retries", attempt, after, before)
		}
		resume <- struct{}{}
	}

	// The last finish: the retries have outlasted the first lease.
	receive(t, 30*time.Second, "the last finish did not start", inTx)
	if !dbClockPast(firstLease) {
		t.Fatalf("the finish retries ended before the first lease %v expired; the test proves nothing", firstLease)
	}
	releaseTx <- struct{}{}
	receive(t, 30*time.Second, "the last finish did not commit", committed)
	// Committed, not yet answered: the claim is live and finishing, and its
	// lease is gone because the finish ended it.
	h.w.RenewOnce()
	if v := testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalStale)); v != 0 {
		t.Errorf("stale renewals %v after the finish committed, want 0", v)
	}
	answer <- struct{}{}
	h.awaitOutcome(t, 30*time.Second, "the job succeeded", metrics.OutcomeSucceeded, 1)

	wantJob(t, pool, id, pg.StatusSucceeded, 1)
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id = $1`, id); n != 1 {
		t.Fatalf("loaded %d rows, want 1", n)
	}
	if n := pgtest.Count(t, pool, `SELECT last_value::int FROM finish_target_calls`); n != failures+1 {
		t.Fatalf("the target was called %d times, want %d refusals and the success", n, failures)
	}
	for _, reason := range []string{metrics.LostNotRenewed, metrics.LostMarginGone, metrics.LostRevoked, metrics.LostFencedWrite, metrics.LostSuperseded} {
		if v := testutil.ToFloat64(h.m.ClaimsLost.WithLabelValues(reason)); v != 0 {
			t.Errorf("claims lost (%s) %v, want 0", reason, v)
		}
	}
	if v := testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalRenewed)); v < failures {
		t.Errorf("renewals %v, want at least one per failed finish (%d)", v, failures)
	}
	if v := h.outcome(metrics.OutcomeStale); v != 0 {
		t.Errorf("stale outcomes %v", v)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}
