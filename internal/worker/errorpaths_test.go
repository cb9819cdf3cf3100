package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// A finish that the target refuses deterministically ends the job FAILED
// etl_target_failure at once, by a fenced write, on the attempt it happened;
// the jobs that shared its finish group still succeed (issue 12, defect 2).
// Before, the computed result was retried 4 times, thrown away, and the job
// rerun until it ended etl_worker_attempts_exhausted.
func TestDeterministicFinishErrorFailsTheJobAtOnce(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
CREATE FUNCTION reject_marked_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.data LIKE '%reject%' THEN
        RAISE EXCEPTION 'target refuses the row' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER reject_marked_rows BEFORE INSERT ON processed_data
    FOR EACH ROW EXECUTE FUNCTION reject_marked_rows();`); err != nil {
		t.Fatal(err)
	}
	specs := []pg.NewJob{{Payload: records(2, "reject")}}
	for i := range 7 {
		specs = append(specs, pg.NewJob{Payload: records(2, "good"+string(rune('a'+i)))})
	}
	ids := pgtest.InsertJobs(t, pool, specs...)
	cfg := fastConfig()
	cfg.FinishLinger = 50 * time.Millisecond // let the jobs share finish groups
	h := newWorker(t, url, cfg, worker.TestHooks{})
	h.start(t)
	h.awaitOutcome(t, 60*time.Second, "every job finished", metrics.OutcomeSucceeded, 7)
	h.awaitOutcome(t, 60*time.Second, "every job finished", metrics.OutcomeFailed, 1)
	st, attempts, code := jobState(t, pool, ids[0])
	if st != pg.StatusFailed || attempts != 1 || code == nil || *code != codes.TargetFailure {
		t.Fatalf("refused job %s attempt %d code %v, want FAILED %s on attempt 1", st, attempts, code, codes.TargetFailure)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id = $1`, ids[0]); n != 0 {
		t.Fatalf("refused job has %d target rows, want 0", n)
	}
	for _, id := range ids[1:] {
		wantJob(t, pool, id, pg.StatusSucceeded, 1)
		if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id = $1`, id); n != 2 {
			t.Fatalf("good job loaded %d rows, want 2", n)
		}
	}
	if v := h.outcome(metrics.OutcomeStale); v != 0 {
		t.Fatalf("stale outcomes %v", v)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}

// A finish that fails transiently more often than a fixed retry count is
// tried again while the lease is ours, and the computed result lands on the
// attempt it was computed in (issue 12, defect 2). The database raises the
// failure (serialization_failure, 40001) for the first eight target inserts;
// a sequence counts them across rollbacks.
func TestTransientFinishErrorIsRetriedWhileTheLeaseHolds(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
CREATE SEQUENCE flaky_target_calls;
CREATE FUNCTION flaky_target() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('flaky_target_calls') <= 8 THEN
        RAISE EXCEPTION 'target briefly unavailable' USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER flaky_target BEFORE INSERT ON processed_data
    FOR EACH ROW EXECUTE FUNCTION flaky_target();`); err != nil {
		t.Fatal(err)
	}
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(3, "flaky")})
	cfg := fastConfig()
	cfg.Concurrency = 1
	cfg.WakeupSlots = -1 // and no wake-up slot
	h := newWorker(t, url, cfg, worker.TestHooks{})
	h.start(t)
	h.awaitOutcome(t, 60*time.Second, "job succeeded", metrics.OutcomeSucceeded, 1)
	wantJob(t, pool, ids[0], pg.StatusSucceeded, 1)
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id = $1`, ids[0]); n != 3 {
		t.Fatalf("loaded %d rows, want 3", n)
	}
	if n := pgtest.Count(t, pool, `SELECT last_value::int FROM flaky_target_calls`); n < 9 {
		t.Fatalf("the target was called %d times, want the 8 refusals and the success", n)
	}
}

// Renewal never waits on the worker's own finish transaction, and a claim
// that finish ends is not counted stale (issue 12, defect 4). The finish of
// one job is held open inside its transaction (its job row locked) while a
// renewal round runs for the other, still running, job.
func TestRenewalNeverWaitsOnTheWorkersOwnFinish(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(2, "finishing")},
		pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(time.Hour, "", 0)})
	inTx, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	releaseFinish := sync.OnceFunc(func() { close(release) })
	t.Cleanup(func() { once.Do(func() { close(inTx) }); releaseFinish() })
	cfg := fastConfig()
	cfg.Concurrency = 2
	// Long enough that nothing expires, renews or times out by itself while
	// the finish is held: only the explicit round below renews.
	cfg.LeaseDuration, cfg.RenewInterval, cfg.StatementTimeout = 3*time.Minute, time.Minute, 3*time.Minute
	h := newWorker(t, url, cfg, worker.TestHooks{InFinishTx: func() {
		first := false
		once.Do(func() { first = true; close(inTx) })
		if first {
			<-release
		}
	}})
	h.start(t)
	receive(t, 30*time.Second, "the finish did not start", inTx)
	testwait.For(t, 30*time.Second, "the long job running", func() bool { return h.w.Running() == 1 })
	expiry := func(id uuid.UUID) (e time.Time) {
		if err := pool.QueryRow(ctx, `SELECT lease_expires_at FROM etl_job_records WHERE job_record_id = $1`, id).Scan(&e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	before := expiry(ids[1])
	done := make(chan struct{})
	go func() { h.w.RenewOnce(); close(done) }()
	receive(t, 30*time.Second, "the renewal round waited on the worker's own finish transaction", done)
	if after := expiry(ids[1]); !after.After(before) {
		t.Fatalf("running job's lease %v not extended past %v", after, before)
	}
	releaseFinish()
	h.awaitOutcome(t, 30*time.Second, "the held finish committed", metrics.OutcomeSucceeded, 1)
	h.w.RenewOnce() // the finished claim is gone from the live set: not stale
	if v := testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalStale)); v != 0 {
		t.Fatalf("stale renewals %v", v)
	}
	if v := h.outcome(metrics.OutcomeStale); v != 0 {
		t.Fatalf("stale outcomes %v", v)
	}
	wantJob(t, pool, ids[0], pg.StatusSucceeded, 1)
}

// A finish group is bounded by target rows, not only by jobs: a large job
// commits alone rather than making a group of small ones slow (issue 12,
// defect 7).
func TestFinishGroupsAreBoundedByRows(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	specs := []pg.NewJob{{Payload: records(30, "large")}}
	for i := range 7 {
		specs = append(specs, pg.NewJob{Payload: records(4, fmt.Sprint("small", i))})
	}
	pgtest.InsertJobs(t, pool, specs...)
	type grp struct{ jobs, rows int }
	var groups []grp
	cfg := fastConfig()
	cfg.FinishMaxRows = 10
	cfg.FinishLinger = 500 * time.Millisecond // results released together share groups
	// A barrier: every result is handed to the completers at once, so the
	// groups form from all of them and the bounds decide their size.
	var reached sync.WaitGroup
	reached.Add(len(specs))
	h := newWorker(t, url, cfg, worker.TestHooks{
		BeforeFinish: func(*lease.Claim) { reached.Done(); reached.Wait() },
	})
	h.start(t)
	h.awaitOutcome(t, 60*time.Second, "every job succeeded", metrics.OutcomeSucceeded, 8)
	// Every group committed before its jobs' outcomes settled.
	for len(h.sig.FinishGroup) > 0 {
		g := <-h.sig.FinishGroup
		groups = append(groups, grp{g[0], g[1]})
	}
	jobs := 0
	for _, g := range groups {
		jobs += g.jobs
		if g.jobs > 1 && g.rows > cfg.FinishMaxRows {
			t.Fatalf("a group of %d jobs wrote %d rows, over the bound %d", g.jobs, g.rows, cfg.FinishMaxRows)
		}
		if g.rows >= 30 && g.jobs != 1 {
			t.Fatalf("the large job shared a group of %d", g.jobs)
		}
	}
	if jobs != 8 {
		t.Fatalf("groups committed %d jobs, want 8 (groups %v)", jobs, groups)
	}
	if len(groups) == 8 {
		t.Fatalf("every job committed alone (groups %v): the bounds were never exercised", groups)
	}
}

// Every claim statement is bounded by StatementTimeout (issue 12, defect 7):
// a claim stuck behind a lock ends with a timeout and is tried again,
// instead of holding the producer forever.
func TestClaimIsBoundedByTheStatementTimeout(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE etl_job_claim_queue IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var bufMu sync.Mutex
	logs := &lockedWriter{w: &buf, mu: &bufMu}
	logText := func() string { bufMu.Lock(); defer bufMu.Unlock(); return buf.String() }
	cfg := fastConfig()
	cfg.StatementTimeout = 200 * time.Millisecond
	h := newWorkerWith(t, url, cfg, worker.TestHooks{}, harnessOptions{log: slog.New(slog.NewJSONHandler(logs, nil))})
	h.start(t)
	testwait.For(t, 30*time.Second, "a claim ended by its timeout", func() bool {
		return strings.Contains(logText(), `"error_class":"timeout"`)
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(1, "after")})
	h.awaitOutcome(t, 30*time.Second, "the job after the lock succeeded", metrics.OutcomeSucceeded, 1)
}

// A claim whose worker is gone never commits (issue 12, defect 7, and the
// flaky TestClaimIsBoundedByTheStatementTimeout): the claim statement,
// blocked behind a lock, loses its connection (the proxy cuts it, so pgx's
// cancel request cannot arrive either); once the lock frees, the server
// runs it, and when claims ran on their own (autocommit) it committed and
// leased the job to nobody for the whole lease. The producer commits a
// claim only after reading its rows, so the orphaned claim rolls back and
// the job is claimed once, by a claim the worker received.
func TestClaimCutFromItsWorkerNeverCommits(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	proxy := pgtest.NewProxy(t, url)
	cfg := fastConfig()
	cfg.ChunkedSlots = -1                  // one claimer: the small-job producer
	cfg.StatementTimeout = 5 * time.Second // the cut comes first
	cfg.LeaseDuration = 2 * time.Minute    // a lease leaked by the claim outlives the test
	h := newWorkerWith(t, proxy.URL(url), cfg, worker.TestHooks{}, harnessOptions{renewURL: url, execConns: 1})
	h.start(t)
	// A first round, so the blocked claim below runs on a connection whose
	// statements are prepared: its whole round trip reaches the server.
	receive(t, 30*time.Second, "no claim round", h.sig.Claimed)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE etl_job_claim_queue IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var locker int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&locker); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "a claim blocked behind the lock", func() bool {
		return pgtest.Count(t, pool, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND $1 = ANY(pg_blocking_pids(pid))`, locker) > 0
	})
	proxy.Cut()
	// The job becomes claimable with the lock's release: the blocked claim
	// sees it.
	ids := pgtest.InsertJobs(t, tx, pg.NewJob{Payload: records(1, "cut")})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	h.awaitOutcome(t, 30*time.Second, "the job claimed after the cut succeeded", metrics.OutcomeSucceeded, 1)
	wantJob(t, pool, ids[0], pg.StatusSucceeded, 1)
	if n := h.outcome(metrics.OutcomeClaimed); n != 1 {
		t.Fatalf("the worker received %v claims, want 1", n)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}

// An attempt that runs past MaxJobDuration is cancelled with ErrJobTimeout,
// no longer renewed, and the job ends FAILED etl_job_timeout on that
// attempt (issue 12, defect 7).
func TestJobPastItsMaximumDurationFailsWithJobTimeout(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: `{}`})
	handlers, causes := untilCancelled()
	cfg := fastConfig()
	cfg.MaxJobDuration = 300 * time.Millisecond
	h := newWorkerWith(t, url, cfg, worker.TestHooks{}, harnessOptions{handlers: handlers})
	h.start(t)
	if cause := receive(t, 30*time.Second, "the handler was not cancelled", causes); !errors.Is(cause, worker.ErrJobTimeout) {
		t.Fatalf("handler cause %v, want ErrJobTimeout", cause)
	}
	h.awaitOutcome(t, 30*time.Second, "job failed", metrics.OutcomeFailed, 1)
	if st, attempts, code := jobState(t, pool, ids[0]); st != pg.StatusFailed || attempts != 1 || code == nil || *code != codes.JobTimeout {
		t.Fatalf("job %s attempt %d code %v, want FAILED %s on attempt 1", st, attempts, code, codes.JobTimeout)
	}
	if v := testutil.ToFloat64(h.m.JobTimeouts); v != 1 {
		t.Fatalf("job timeouts %v", v)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}
