package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
	"github.com/mightyetl/mightyetl/internal/worker"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// shortLease is a configuration whose lease lapses within seconds, so tests
// drive expiry through the database clock quickly.
func shortLease() worker.Config {
	cfg := fastConfig()
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin = 2*time.Second, 400*time.Millisecond, 400*time.Millisecond
	return cfg
}

func leaseLive(t *testing.T, pool *pgxpool.Pool, id any) bool {
	t.Helper()
	var live bool
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(lease_expires_at > clock_timestamp(), false) FROM etl_job_records WHERE job_record_id=$1`, id).Scan(&live); err != nil {
		t.Fatal(err)
	}
	return live
}

// A worker whose renewer is paused (not killed) keeps its job only until the
// database says the lease expired; then a rival reclaims, and the paused
// worker's late finish is fenced and rolls back.
func TestPausedRenewerIsReclaimedOnlyAfterDatabaseExpiry(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(4*time.Second, "", 2)})
	renewGate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(renewGate) }) }
	cfg := shortLease()
	cfg.OwnerID = "paused-renewer"
	cfg.Concurrency = 1
	cfg.WakeupSlots = -1 // and no wake-up slot
	a := newWorker(t, url, cfg, worker.TestHooks{BeforeRenew: func() { <-renewGate }})
	a.start(t)
	t.Cleanup(openGate) // runs before a's Stop (cleanups are LIFO), so Stop never waits on the gate
	testwait.For(t, 20*time.Second, "A running", func() bool { return a.w.Running() == 1 })
	// A's lease expiry by the database clock (its renewer is paused, so it
	// never moves).
	var aExpiry time.Time
	if err := pool.QueryRow(context.Background(), `SELECT lease_expires_at FROM etl_job_records WHERE job_record_id=$1`, ids[0]).Scan(&aExpiry); err != nil {
		t.Fatal(err)
	}
	// The rival finds nothing while the database says the lease is live.
	testwait.For(t, 20*time.Second, "A's lease expired by the database clock", func() bool {
		if !leaseLive(t, pool, ids[0]) {
			return true
		}
		res, err := lease.ClaimJobs(context.Background(), pool, lease.ClaimParams{OwnerID: "rival-claimer", Limit: 1, LeaseDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Claimed) == 0 {
			return false
		}
		// Legal only if A's lease expired between the check and the claim:
		// by the database clock, now is past A's expiry. (The lease is live
		// again afterwards: it is the rival's.)
		var past bool
		if err := pool.QueryRow(context.Background(), `SELECT clock_timestamp() >= $1`, aExpiry).Scan(&past); err != nil {
			t.Fatal(err)
		}
		if !past {
			t.Fatal("rival claimed a live lease")
		}
		return true
	})
	// After expiry the rival gets it (if the loop above did not already).
	testwait.For(t, 20*time.Second, "rival holds the job", func() bool {
		var owner *string
		if err := pool.QueryRow(context.Background(), `SELECT lease_owner_id FROM etl_job_records WHERE job_record_id=$1`, ids[0]).Scan(&owner); err != nil {
			t.Fatal(err)
		}
		if owner != nil && *owner == "rival-claimer" {
			return true
		}
		res, err := lease.ClaimJobs(context.Background(), pool, lease.ClaimParams{OwnerID: "rival-claimer", Limit: 1, LeaseDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Claimed) == 1
	})
	// A's handler finishes (4s) and its fenced finish affects zero rows.
	openGate()
	a.awaitOutcome(t, 30*time.Second, "A's late finish fenced", metrics.OutcomeStale, 1)
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data`); n != 0 {
		t.Fatalf("stale worker's %d target rows survived", n)
	}
	wantJob(t, pool, ids[0], pg.StatusRunning, 2)
}

// Handlers that occupy every execution slot and hold every execution
// connection for several renewal intervals cannot starve renewal: it has its
// own goroutine and pool.
func TestRenewalIsNotStarvedByBusyHandlers(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	const slots = 3
	cfg := shortLease()
	cfg.Concurrency = slots
	var execPool atomic.Pointer[pgxpool.Pool]
	// The handlers hold their connections until the renewer has started
	// holdRounds rounds after they all took one: past the lease duration.
	const holdRounds = 7 // 2.8s of 400ms rounds, 1.4 lease durations
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	handlers := worker.DefaultHandlers(1000)
	base := handlers[pg.KindDiagnostic]
	holding := make(chan struct{}, slots)
	handlers[pg.KindDiagnostic] = func(ctx context.Context, c *lease.Claim) (worker.Output, error) {
		// Hold one execution connection for the whole computation.
		conn, err := execPool.Load().Acquire(ctx)
		if err != nil {
			return worker.Output{}, err
		}
		holding <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			conn.Release()
			return worker.Output{}, context.Cause(ctx)
		}
		conn.Release()
		return base(ctx, c)
	}
	h := newWorkerWith(t, url, cfg, worker.TestHooks{}, harnessOptions{execConns: slots, handlers: handlers})
	execPool.Store(h.exec)
	var specs []pg.NewJob
	for range slots {
		specs = append(specs, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(0, "", 1)})
	}
	pgtest.InsertJobs(t, pool, specs...)
	h.start(t)
	for range slots {
		receive(t, 30*time.Second, "the handlers did not start", holding)
	}
	if st := h.exec.Stat(); st.AcquiredConns() != slots || st.MaxConns() != slots {
		t.Fatalf("handlers hold %d of %d execution connections", st.AcquiredConns(), st.MaxConns())
	}
	for len(h.sig.RenewRound) > 0 { // rounds before every connection was held
		<-h.sig.RenewRound
	}
	for range holdRounds {
		receive(t, 30*time.Second, "the renewer stopped its rounds", h.sig.RenewRound)
	}
	releaseOnce()
	h.awaitOutcome(t, 60*time.Second, "all succeeded", metrics.OutcomeSucceeded, slots)
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE attempt_count <> 1`); n != 0 {
		t.Fatalf("%d jobs were reclaimed: renewal starved", n)
	}
	if v := testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalRenewed)); v < slots*5 {
		t.Fatalf("renewals %v, want ≥ %d", v, slots*5)
	}
}

// A connection cut between the renewer and PostgreSQL never counts as a
// renewal: the worker retries only within its conservative view of the
// lease, then treats the claim as lost (fail closed) and stops the handler.
func TestRenewalConnectionCutFailsClosed(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	proxy := pgtest.NewProxy(t, url)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(time.Hour, "", 1)})
	cfg := shortLease()
	cfg.Concurrency = 1
	cfg.WakeupSlots = -1 // and no wake-up slot
	h := newWorkerWith(t, url, cfg, worker.TestHooks{}, harnessOptions{renewURL: proxy.URL(url)})
	h.start(t)
	testwait.For(t, 20*time.Second, "running", func() bool { return h.w.Running() == 1 })
	testwait.For(t, 20*time.Second, "a renewal through the proxy", func() bool {
		return testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalRenewed)) >= 1
	})
	proxy.Cut()
	renewedAtCut := testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalRenewed))
	h.awaitLost(t, 30*time.Second, "claim declared lost", metrics.LostMarginGone, 1)
	if got := testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalRenewed)); got != renewedAtCut {
		t.Fatalf("renewals counted during the cut: %v -> %v", renewedAtCut, got)
	}
	if testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalDBError)) < 1 {
		t.Fatal("no db_error renewal counted")
	}
	h.awaitOutcome(t, 20*time.Second, "handler stopped", metrics.OutcomeStale, 1)
	// The database never saw a renewal: the lease runs out and the job is
	// claimable by anyone (here: the worker itself, as a new attempt).
	proxy.Restore()
	testwait.For(t, 30*time.Second, "job reclaimed as attempt 2", func() bool {
		_, attempts, _ := jobState(t, pool, ids[0])
		return attempts == 2
	})
}

// Once Stop returns no renewal round runs again: the renewer's loop has
// returned (its Done is closed, and only the loop starts rounds), and no
// round started after Stop returned.
func TestShutdownStopsRenewal(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(time.Hour, "", 0)})
	cfg := shortLease()
	cfg.ShutdownGrace = 10 * time.Millisecond
	h := newWorker(t, url, cfg, worker.TestHooks{})
	h.start(t)
	for range 2 {
		receive(t, 20*time.Second, "no renewal round", h.sig.RenewRound)
	}
	if err := h.w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.w.RenewerDone():
	default:
		t.Fatal("Stop returned while the renewal loop still ran")
	}
	if h.outcome(metrics.OutcomeReleased) != 1 {
		t.Fatal("running job not released")
	}
}

// Retry and failure committed before a renewal make it affect zero rows and
// stay as they are; a renewal never revives them.
func TestRetryOrFailureBeforeRenewalStays(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(1, "a")}, pg.NewJob{Payload: records(1, "b")})
	ctx := context.Background()
	res, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: "renew-order", Limit: 2, LeaseDuration: time.Minute})
	if err != nil || len(res.Claimed) != 2 {
		t.Fatal(err)
	}
	a, b := res.Claimed[0], res.Claimed[1]
	if err := lease.Retry(ctx, pool, a.Ref, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := lease.Fail(ctx, pool, b.Ref, codes.TargetFailure); err != nil {
		t.Fatal(err)
	}
	ren, err := lease.Renew(ctx, pool, "renew-order", []lease.Ref{a.Ref, b.Ref}, time.Hour)
	if err != nil || ren[0].Renewed || ren[1].Renewed {
		t.Fatalf("renewal after retry/fail: %+v %v", ren, err)
	}
	if st, _, _ := jobState(t, pool, a.JobID); st != pg.StatusPending {
		t.Fatalf("retried job now %s", st)
	}
	if st, _, _ := jobState(t, pool, b.JobID); st != pg.StatusFailed {
		t.Fatalf("failed job now %s", st)
	}
}

var (
	uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	hashPattern = regexp.MustCompile(`[0-9a-f]{64}`)
)

// The renewal path never reads or emits the payload: a realistic payload with
// personal data never appears in any log line or metric, and no log or
// label carries a job id, lease id or hash.
func TestPersonalDataNeverReachesLogsOrMetrics(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pii := []string{"Jane Q. Citizen", "jane.citizen@example.org", "900101-2345678", "+82-10-5555-0199"}
	payload := `[{"id":"patient-0001","name":"Jane Q. Citizen","email":"jane.citizen@example.org","national_id":"900101-2345678","phone":"+82-10-5555-0199","amount":"12.30"}]`
	spec := `{"durationMillis":1500,"records":` + payload + `,"failWith":null}`
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: spec}, pg.NewJob{Payload: `[{"id":"x","amount":"Jane Q. Citizen"}]`})
	cfg := shortLease()
	h := newWorkerWith(t, url, cfg, worker.TestHooks{}, harnessOptions{log: log})
	h.start(t)
	h.awaitOutcome(t, 30*time.Second, "both finished", metrics.OutcomeSucceeded, 1)
	h.awaitOutcome(t, 30*time.Second, "both finished", metrics.OutcomeFailed, 1)
	if testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalRenewed)) < 1 {
		t.Fatal("the job did not run long enough to be renewed")
	}
	if err := h.w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var exposition strings.Builder
	for _, mf := range mfs {
		exposition.WriteString(mf.String())
	}
	logMu.Lock()
	logText := logs.String()
	logMu.Unlock()
	for name, text := range map[string]string{"logs": logText, "metrics": exposition.String()} {
		for _, s := range pii {
			if strings.Contains(text, s) {
				t.Errorf("%s contain personal data %q", name, s)
			}
		}
		for _, id := range ids {
			if strings.Contains(text, id.String()) {
				t.Errorf("%s contain a job id", name)
			}
		}
		if uuidPattern.MatchString(text) || hashPattern.MatchString(text) {
			t.Errorf("%s contain an id or hash", name)
		}
	}
	if !strings.Contains(logText, "worker started") {
		t.Fatal("log capture saw nothing: the test would pass vacuously")
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// When a worker reclaims a job it still runs under an expired older claim,
// the older handler is stopped: one process never computes a job twice.
func TestReclaimOfOwnExpiredJobStopsTheOlderHandler(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(time.Hour, "", 0)})
	cfg := fastConfig() // renewals every 10s: only the poll's reclaim can notice
	cfg.Concurrency = 2
	cfg.ShutdownGrace = 10 * time.Millisecond
	h := newWorker(t, url, cfg, worker.TestHooks{})
	h.start(t)
	testwait.For(t, 20*time.Second, "running", func() bool { return h.w.Running() == 1 })
	pgtest.ExpireLease(t, pool, ids[0], time.Millisecond)
	h.awaitLost(t, 20*time.Second, "older claim superseded", metrics.LostSuperseded, 1)
	h.awaitOutcome(t, 20*time.Second, "older handler stopped", metrics.OutcomeStale, 1)
	if got := h.w.Running(); got != 1 {
		t.Fatalf("running %d, want only the new claim", got)
	}
	if err := h.w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.outcome(metrics.OutcomeReleased) != 1 {
		t.Fatal("the new claim was not released on shutdown")
	}
}

// A database connection lost under a finish or a fenced failure write loses
// no job: nothing half-commits, the write is tried again while the lease is
// ours, and the job ends exactly once.
func TestLostConnectionDuringFinishLosesNoJob(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	proxy := pgtest.NewProxy(t, url)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(3, "cut")}, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(0, "permanent", 0)})
	var cuts, restores atomic.Int32
	cfg := fastConfig()
	cfg.Concurrency = 1  // one job at a time: each finish meets its own cut
	cfg.WakeupSlots = -1 // and no wake-up slot
	h := newWorkerWith(t, proxy.URL(url), cfg, worker.TestHooks{
		BeforeFinish: func(*lease.Claim) {
			cuts.Add(1)
			proxy.Cut() // every execution connection breaks before the write
		},
		WriteFailed: func() {
			restores.Add(1)
			proxy.Restore() // the path comes back; the retry must land
		},
	}, harnessOptions{renewURL: url})
	h.start(t)
	h.awaitOutcome(t, 60*time.Second, "both jobs finished", metrics.OutcomeSucceeded, 1)
	h.awaitOutcome(t, 60*time.Second, "both jobs finished", metrics.OutcomeFailed, 1)
	if cuts.Load() != 2 || restores.Load() < 2 {
		t.Fatalf("cuts %d restores %d: the writes did not meet a broken connection", cuts.Load(), restores.Load())
	}
	wantJob(t, pool, ids[0], pg.StatusSucceeded, 1)
	if st, _, code := jobState(t, pool, ids[1]); st != pg.StatusFailed || code == nil || *code != codes.DiagnosticRequestedFailure {
		t.Fatalf("job 1: %s %v", st, code)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id=$1`, ids[0]); n != 3 {
		t.Fatalf("processed rows %d, want 3", n)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_job_events WHERE event_kind='job_lifecycle'`); n != 2 {
		t.Fatalf("lifecycle events %d, want 2", n)
	}
}

// A finish whose COMMIT reached the database and whose answer was lost
// counts its success: the retry's fenced write matches nothing, and the job
// SUCCEEDED at this claim's own attempt can only be this claim's. Before,
// the worker counted its own success as a loss (stale), and a test that cut
// connections around finishes (TestLostConnectionDuringFinishLosesNoJob)
// could wait for a success that never came.
func TestFinishCommitWithoutAnswerCountsItsSuccess(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	proxy := pgtest.NewProxy(t, url)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(2, "held")})
	var held, failed atomic.Int32
	cfg := fastConfig()
	cfg.StatementTimeout = time.Second // the unanswered COMMIT is given up after a second
	h := newWorkerWith(t, proxy.URL(url), cfg, worker.TestHooks{
		BeforeFinishCommit: func() {
			if held.Add(1) == 1 {
				proxy.HoldReplies() // the COMMIT goes through; its answer does not
			}
		},
		WriteFailed: func() {
			failed.Add(1)
			proxy.Restore()
		},
	}, harnessOptions{renewURL: url})
	h.start(t)
	h.awaitOutcome(t, 60*time.Second, "the job's success counted", metrics.OutcomeSucceeded, 1)
	if failed.Load() < 1 {
		t.Fatal("the finish never failed: its COMMIT's answer was not lost")
	}
	wantJob(t, pool, ids[0], pg.StatusSucceeded, 1)
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id=$1`, ids[0]); n != 2 {
		t.Fatalf("processed rows %d, want 2", n)
	}
	for _, o := range []string{metrics.OutcomeStale, metrics.OutcomeFailed} {
		if v := h.outcome(o); v != 0 {
			t.Fatalf("outcome %s counted %v times", o, v)
		}
	}
	if v := testutil.ToFloat64(h.m.ClaimsLost.WithLabelValues(metrics.LostFencedWrite)); v != 0 {
		t.Fatalf("claims lost by a fenced write: %v", v)
	}
}
