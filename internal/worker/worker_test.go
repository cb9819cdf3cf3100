package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
	"github.com/mightyetl/mightyetl/internal/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		// The in-process NATS server of the outage test (stopped and
		// restarted on one port) can leave its access-time ticker and a
		// stream flusher winding down after Shutdown returns; they belong
		// to nats-server, not to mightyETL.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
	)
}

func records(n int, tag string) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":"%s-%d","name":"jane","amount":"12.345"}`, tag, i)
	}
	b.WriteString("]")
	return b.String()
}

func diagnostic(d time.Duration, failWith string, recs int) string {
	spec := map[string]any{"durationMillis": d.Milliseconds(), "records": json.RawMessage(records(recs, uuid.NewString()[:8]))}
	if failWith != "" {
		spec["failWith"] = failWith
	} else {
		spec["failWith"] = nil
	}
	b, _ := json.Marshal(spec)
	return string(b)
}

type harness struct {
	w    *worker.Worker
	m    *metrics.Worker
	reg  *prometheus.Registry
	exec *pgxpool.Pool
	sig  worker.TestSignals
	// seen counts the outcomes and losses read from sig so far (the test
	// goroutine's alone).
	seen map[string]int
}

func newWorker(t *testing.T, url string, cfg worker.Config, hooks worker.TestHooks) *harness {
	t.Helper()
	return newWorkerWith(t, url, cfg, hooks, harnessOptions{})
}

// harnessOptions adjusts newWorkerWith; zero values take the defaults.
type harnessOptions struct {
	renewURL  string // renewal pool URL (e.g. through a proxy); default url
	execConns int32
	handlers  map[string]worker.Handler
	log       *slog.Logger
}

func newWorkerWith(t *testing.T, url string, cfg worker.Config, hooks worker.TestHooks, o harnessOptions) *harness {
	t.Helper()
	if o.renewURL == "" {
		o.renewURL = url
	}
	if o.execConns == 0 {
		o.execConns = int32(min(cfg.Concurrency+4, 20))
	}
	if o.handlers == nil {
		o.handlers = worker.DefaultHandlers(100000)
	}
	exec := pgtest.NewPool(t, url, o.execConns)
	renew := pgtest.NewPool(t, o.renewURL, 2)
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg)
	w := worker.New(cfg, exec, renew, o.handlers, m, o.log)
	sig := w.SetUpTest(hooks)
	return &harness{w: w, m: m, reg: reg, exec: exec, sig: sig, seen: map[string]int{}}
}

// awaitOutcome waits until the worker has settled n claims with outcome in
// all (a metrics.Outcome* value), by its test signal.
func (h *harness) awaitOutcome(t *testing.T, within time.Duration, what, outcome string, n int) {
	t.Helper()
	h.await(t, within, what, h.sig.Outcome, "outcome:", outcome, n)
}

// awaitLost waits until the worker has lost n claims for reason in all (a
// metrics.Lost* value), by its test signal.
func (h *harness) awaitLost(t *testing.T, within time.Duration, what, reason string, n int) {
	t.Helper()
	h.await(t, within, what, h.sig.Lost, "lost:", reason, n)
}

func (h *harness) await(t *testing.T, within time.Duration, what string, ch <-chan string, kind, value string, n int) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for h.seen[kind+value] < n {
		select {
		case v := <-ch:
			h.seen[kind+v]++
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s (%s%s %d of %d)", within, what, kind, value, h.seen[kind+value], n)
		}
	}
}

func (h *harness) start(t *testing.T) {
	t.Helper()
	if err := h.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.w.Stop(context.Background()) })
}

func (h *harness) outcome(o string) float64 {
	return testutil.ToFloat64(h.m.Outcomes.WithLabelValues(o))
}

// receive returns the next value from ch; when none comes within, it fails
// t with failure.
func receive[T any](t *testing.T, within time.Duration, failure string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("%s (waited %s)", failure, within)
		panic("unreachable")
	}
}

func jobState(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) (status string, attempts int, code *string) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT job_status, attempt_count, failure_code FROM etl_job_records WHERE job_record_id=$1`, id).Scan(&status, &attempts, &code); err != nil {
		t.Fatal(err)
	}
	return
}

// wantJob fails t unless job id is in status after attempts attempts.
func wantJob(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, status string, attempts int) {
	t.Helper()
	if st, n, _ := jobState(t, pool, id); st != status || n != attempts {
		t.Fatalf("job %s after %d attempts, want %s after %d", st, n, status, attempts)
	}
}

// untilCancelled is a diagnostic handler that runs until its context ends,
// then sends the cause (once) to causes and returns it.
func untilCancelled() (handlers map[string]worker.Handler, causes <-chan error) {
	ch := make(chan error, 1)
	return map[string]worker.Handler{
		pg.KindDiagnostic: func(hctx context.Context, _ *lease.Claim) (worker.Output, error) {
			<-hctx.Done()
			ch <- context.Cause(hctx)
			return worker.Output{}, context.Cause(hctx)
		},
	}, ch
}

func fastConfig() worker.Config {
	return worker.Config{Concurrency: 8, PollInterval: 20 * time.Millisecond, LeaseDuration: 30 * time.Second,
		RenewInterval: 10 * time.Second, SafetyMargin: 5 * time.Second, RetryBaseDelay: time.Millisecond,
		RetryMaxDelay: time.Millisecond, ShutdownGrace: 5 * time.Second}
}

func TestFourWorkersDrainThousandJobsExactlyOnce(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	specs := make([]pg.NewJob, 1000)
	for i := range specs {
		specs[i] = pg.NewJob{Payload: records(1+i%3, fmt.Sprint("j", i))}
	}
	ids := pgtest.InsertJobs(t, pool, specs...)
	var hs []*harness
	for i := range 4 {
		cfg := fastConfig()
		cfg.OwnerID = fmt.Sprintf("drain-worker-%d", i)
		h := newWorker(t, url, cfg, worker.TestHooks{})
		h.start(t)
		hs = append(hs, h)
	}
	testwait.For(t, 2*time.Minute, "all jobs succeeded", func() bool {
		return pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_status='SUCCEEDED'`) == 1000
	})
	// Exactly once: per job, processed rows equal its record count.
	perJob := map[uuid.UUID]int{}
	rows, err := pool.Query(context.Background(), `SELECT job_record_id, count(*) FROM processed_data GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		perJob[id] = n
	}
	rows.Close()
	for i, id := range ids {
		if want := 1 + i%3; perJob[id] != want {
			t.Fatalf("job %d loaded %d rows, want %d", i, perJob[id], want)
		}
	}
	// Durable jobs write no response-ledger row (migration 00005).
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_idempotency_records`); n != 0 {
		t.Fatalf("ledger rows %d, want 0", n)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_claim_queue`); n != 0 {
		t.Fatalf("claim queue rows %d after every job finished, want 0", n)
	}
	// No job was ever owned by two live leases: nothing was reclaimed, so
	// every job ran under exactly one claim.
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE attempt_count <> 1 OR request_payload IS NOT NULL OR lease_claim_id IS NOT NULL`); n != 0 {
		t.Fatalf("%d jobs with attempt_count <> 1 or leftover payload/lease", n)
	}
	var total float64
	for _, h := range hs {
		total += h.outcome(metrics.OutcomeSucceeded)
		if h.outcome(metrics.OutcomeStale) != 0 {
			t.Fatal("stale outcome in a healthy drain")
		}
	}
	if total != 1000 {
		t.Fatalf("succeeded outcomes %v", total)
	}
}

// pause blocks the executor of matching jobs at BeforeFinish until released.
type pause struct {
	once    sync.Once
	reached chan uuid.UUID
	release chan struct{}
}

// newPause returns a barrier that is always opened when the test ends, so a
// failing test never leaves an executor blocked.
func newPause(t *testing.T) *pause {
	p := &pause{reached: make(chan uuid.UUID, 16), release: make(chan struct{})}
	t.Cleanup(p.open)
	return p
}

func (p *pause) open() { p.once.Do(func() { close(p.release) }) }

func (p *pause) hook(c *lease.Claim) {
	p.reached <- c.JobID
	<-p.release
}

func TestStaleWorkerLateFinishRollsBackAfterReclaim(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(3, "fence")})
	p := newPause(t)
	cfgA := fastConfig()
	cfgA.OwnerID = "stale-worker-a"
	cfgA.Concurrency = 1  // the paused job fills A's only slot: A cannot reclaim it itself
	cfgA.WakeupSlots = -1 // and no wake-up slot
	a := newWorker(t, url, cfgA, worker.TestHooks{BeforeFinish: p.hook})
	a.start(t)
	// A computed the result and is paused before its finish transaction.
	got := <-p.reached
	if got != ids[0] {
		t.Fatalf("paused on %v", got)
	}
	// The database clock says A's lease is over; B reclaims and succeeds.
	pgtest.ExpireLease(t, pool, ids[0], time.Millisecond)
	cfgB := fastConfig()
	cfgB.OwnerID = "fresh-worker-b"
	b := newWorker(t, url, cfgB, worker.TestHooks{})
	b.start(t)
	b.awaitOutcome(t, 30*time.Second, "B succeeded", metrics.OutcomeSucceeded, 1)
	p.open()
	a.awaitOutcome(t, 30*time.Second, "A counted stale", metrics.OutcomeStale, 1)
	if a.outcome(metrics.OutcomeSucceeded) != 0 {
		t.Fatal("stale worker counted a success")
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id=$1`, ids[0]); n != 3 {
		t.Fatalf("processed rows %d, want exactly 3 (B's)", n)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_claim_queue WHERE job_record_id=$1`, ids[0]); n != 0 {
		t.Fatalf("claim queue rows %d of a finished job, want 0", n)
	}
	wantJob(t, pool, ids[0], pg.StatusSucceeded, 2)
}

func TestGracefulShutdownReleasesClaimsForImmediateReclaim(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(time.Hour, "", 1)},
		pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(time.Hour, "", 1)})
	cfg := fastConfig()
	cfg.OwnerID = "shutdown-worker"
	cfg.ShutdownGrace = 50 * time.Millisecond
	a := newWorker(t, url, cfg, worker.TestHooks{})
	a.start(t)
	testwait.For(t, 30*time.Second, "both running", func() bool { return a.w.Running() == 2 })
	if err := a.w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.outcome(metrics.OutcomeReleased) != 2 {
		t.Fatalf("released %v", a.outcome(metrics.OutcomeReleased))
	}
	for _, id := range ids {
		wantJob(t, pool, id, pg.StatusPending, 0)
	}
	// Another worker takes them at once: no waiting for lease expiry.
	res, err := lease.ClaimJobs(context.Background(), pool, lease.ClaimParams{OwnerID: "next-worker", Limit: 5, LeaseDuration: time.Minute})
	if err != nil || len(res.Claimed) != 2 {
		t.Fatalf("reclaim after release: %d %v", len(res.Claimed), err)
	}
}

func TestFailureCodesAndRetries(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ids := pgtest.InsertJobs(t, pool,
		pg.NewJob{Payload: `[{"id":"a","amount":"not-a-number"}]`},                                 // deterministic record failure
		pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(0, "permanent", 0)},                 // requested permanent
		pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(0, "transient", 0), MaxAttempts: 3}, // retried, then exhausted
		pg.NewJob{Payload: records(2, "ok")},
		pg.NewJob{Payload: records(1, "tampered")},
	)
	// Tamper with the stored payload of the last job: the digest no longer matches.
	if _, err := pool.Exec(context.Background(), `UPDATE etl_job_records SET request_payload = '[{"id":"evil"}]' WHERE job_record_id=$1`, ids[4]); err != nil {
		t.Fatal(err)
	}
	h := newWorker(t, url, fastConfig(), worker.TestHooks{})
	h.start(t)
	testwait.For(t, 60*time.Second, "all terminal", func() bool {
		return pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_status IN ('SUCCEEDED','FAILED')`) == 5
	})
	want := []struct {
		status   string
		code     string
		attempts int
	}{
		{"FAILED", codes.InvalidRecord, 1},
		{"FAILED", codes.DiagnosticRequestedFailure, 1},
		{"FAILED", codes.TargetUnavailable, 3},
		{"SUCCEEDED", "", 1},
		{"FAILED", codes.JobIntegrityFailure, 1},
	}
	for i, w := range want {
		st, attempts, code := jobState(t, pool, ids[i])
		got := ""
		if code != nil {
			got = *code
		}
		if st != w.status || got != w.code || attempts != w.attempts {
			t.Errorf("job %d: %s %q attempts %d, want %s %q %d", i, st, got, attempts, w.status, w.code, w.attempts)
		}
	}
	if h.outcome(metrics.OutcomeRetried) != 2 {
		t.Errorf("retried %v, want 2", h.outcome(metrics.OutcomeRetried))
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_status IN ('SUCCEEDED','FAILED') AND request_payload IS NOT NULL`); n != 0 {
		t.Fatalf("%d terminal rows kept their payload", n)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id <> $1`, ids[3]); n != 0 {
		t.Fatalf("failed jobs loaded %d rows", n)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_job_events WHERE event_kind='job_lifecycle'`); n != 5 {
		t.Fatalf("lifecycle events %d, want 5", n)
	}
}

func TestDatabaseClockDecidesLeaseLossWhateverTheHostThinks(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(time.Hour, "", 0)})
	cfg := fastConfig()
	cfg.OwnerID = "clock-worker"
	cfg.Concurrency = 1  // the running job fills the only slot: the renewal, not a reclaim, must notice
	cfg.WakeupSlots = -1 // and no wake-up slot
	cfg.ShutdownGrace = 10 * time.Millisecond
	h := newWorker(t, url, cfg, worker.TestHooks{})
	h.start(t)
	testwait.For(t, 30*time.Second, "running", func() bool { return h.w.Running() == 1 })
	// The worker's own view leaves ~30s; the database says the lease is over.
	pgtest.ExpireLease(t, pool, ids[0], time.Millisecond)
	h.w.RenewOnce()
	h.awaitOutcome(t, 30*time.Second, "handler stopped as stale", metrics.OutcomeStale, 1)
	if v := testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalStale)); v != 1 {
		t.Fatalf("stale renewals %v", v)
	}
	st, _, _ := jobState(t, pool, ids[0])
	if st != pg.StatusRunning {
		t.Fatalf("the stale worker wrote the job: %s", st)
	}
}

func TestLongJobRenewsAndStaysSinglyOwned(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(5*time.Second, "", 2)})
	cfg := fastConfig()
	cfg.OwnerID = "renewing-worker"
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin = time.Second, 250*time.Millisecond, 100*time.Millisecond
	h := newWorker(t, url, cfg, worker.TestHooks{})
	h.start(t)
	testwait.For(t, 30*time.Second, "running", func() bool { return h.w.Running() == 1 })
	// A rival keeps trying to claim the whole time; it must never get the job.
	rivalErr := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				rivalErr <- nil
				return
			default:
			}
			res, err := lease.ClaimJobs(context.Background(), pool, lease.ClaimParams{OwnerID: "rival-worker", Limit: 1, LeaseDuration: time.Second})
			if err != nil {
				rivalErr <- err
				return
			}
			if len(res.Claimed) > 0 || res.Exhausted > 0 {
				rivalErr <- errors.New("rival claimed a renewed job")
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	h.awaitOutcome(t, 60*time.Second, "long job succeeded", metrics.OutcomeSucceeded, 1)
	close(stop)
	if err := <-rivalErr; err != nil {
		t.Fatal(err)
	}
	wantJob(t, pool, ids[0], pg.StatusSucceeded, 1)
	if v := testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalRenewed)); v < 5 {
		t.Fatalf("renewals %v, want at least 5", v)
	}
}

// A revocation is only a hint (design invariant 10, issue 12 defect 6): it
// makes the worker renew that claim at once, and the handler stops only if
// the database says the lease is gone, with the typed cause ErrRevoked. A
// revocation for a lease the database still holds renews it and the handler
// goes on.
func TestRevocationStopsTheHandlerOnlyWhenTheDatabaseSaysSo(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ids := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: `{}`})
	handlers, causes := untilCancelled()
	h := newWorkerWith(t, url, fastConfig(), worker.TestHooks{}, harnessOptions{handlers: handlers})
	h.start(t)
	testwait.For(t, 30*time.Second, "running", func() bool { return h.w.Running() == 1 })
	renewed := func() float64 { return testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalRenewed)) }

	h.w.Revoke(uuid.New()) // not ours: nothing happens
	h.w.Revoke(ids[0])     // ours, and the lease holds: renewed, not stopped
	testwait.For(t, 30*time.Second, "the revocation's renewal", func() bool { return renewed() == 1 })
	if h.w.Running() != 1 {
		t.Fatal("a revocation of a lease the database still holds stopped the handler")
	}
	if v := testutil.ToFloat64(h.m.ClaimsLost.WithLabelValues(metrics.LostRevoked)); v != 0 {
		t.Fatalf("lost(revoked) %v for a live lease", v)
	}
	if st, _, _ := jobState(t, pool, ids[0]); st != pg.StatusRunning {
		t.Fatalf("job %s, want still RUNNING", st)
	}

	cancelJob(t, pool, ids[0]) // the database ends the lease
	h.w.Revoke(ids[0])
	if cause := receive(t, 30*time.Second, "handler not stopped after the database cancelled the job", causes); !errors.Is(cause, worker.ErrRevoked) {
		t.Fatalf("handler cause %v, want ErrRevoked", cause)
	}
	h.awaitOutcome(t, 30*time.Second, "loss counted cancelled", metrics.OutcomeCancelled, 1)
	if v := testutil.ToFloat64(h.m.ClaimsLost.WithLabelValues(metrics.LostRevoked)); v != 1 {
		t.Fatalf("lost(revoked) %v", v)
	}
}

// A key resubmitted after its old job was pruned runs to SUCCEEDED like any
// new job (issue 12, defect 3: a leftover response-ledger row of the pruned
// job used to fail the new job's finish on a unique key, forever). Durable
// jobs write no ledger row since migration 00005; this pins that the finish
// of a reused key cannot collide with anything the old job left.
func TestKeyResubmittedAfterPruneSucceeds(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	payload := diagnostic(0, "", 2)
	// Every submission carries the same key; InsertJobs fails unless it
	// creates the job.
	job := pg.NewJob{Kind: pg.KindDiagnostic, SubmissionKeyHash: pgtest.SHA("reused-key"), Payload: payload}
	submit := func() uuid.UUID { t.Helper(); return pgtest.InsertJobs(t, pool, job)[0] }
	h := newWorker(t, url, fastConfig(), worker.TestHooks{})
	h.start(t)
	first := submit()
	h.awaitOutcome(t, 30*time.Second, "first job succeeded", metrics.OutcomeSucceeded, 1)
	if _, err := pool.Exec(ctx, `UPDATE etl_job_records SET updated_at = clock_timestamp() - interval '40 days' WHERE job_record_id = $1`, first); err != nil {
		t.Fatal(err)
	}
	if n, err := pg.PruneTerminalJobs(ctx, pool, 30*24*time.Hour, 100); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if n, err := pg.PruneLedger(ctx, pool, 30*24*time.Hour, 100); err != nil {
		t.Fatalf("prune ledger: %d %v", n, err)
	}
	second := submit()
	if second == first {
		t.Fatal("the pruned job's id came back")
	}
	h.awaitOutcome(t, 30*time.Second, "resubmitted job succeeded", metrics.OutcomeSucceeded, 2)
	wantJob(t, pool, second, pg.StatusSucceeded, 1)
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id = $1`, second); n != 2 {
		t.Fatalf("resubmitted job loaded %d rows, want 2", n)
	}
}

// Expired leases on their last attempt take candidates of a claim (they are
// failed, not claimed): a claim that came back full counting them goes on
// claiming at once instead of leaving the jobs behind them to the next poll
// (issue 12, defect 6).
func TestClaimGoesOnPastExhaustedLeases(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	exhausted := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(0, "", 0), MaxAttempts: 1},
		pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(0, "", 0), MaxAttempts: 1})
	if res, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: "gone-worker-1", Limit: 2, LeaseDuration: time.Minute}); err != nil || len(res.Claimed) != 2 {
		t.Fatalf("claim as the gone worker: %v", err)
	}
	pending := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(0, "", 1)},
		pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(0, "", 1)})
	// Expired an hour ago: the oldest candidates, ahead of the pending jobs.
	for _, id := range exhausted {
		pgtest.ExpireLease(t, pool, id, time.Hour)
	}
	cfg := fastConfig()
	cfg.Concurrency = 2
	cfg.PollInterval = time.Hour // only the producer's own loop can reach the pending jobs
	h := newWorker(t, url, cfg, worker.TestHooks{})
	h.start(t)
	h.awaitOutcome(t, 20*time.Second, "pending jobs succeeded", metrics.OutcomeSucceeded, 2)
	for _, id := range pending {
		if st, _, _ := jobState(t, pool, id); st != pg.StatusSucceeded {
			t.Fatalf("pending job %s", st)
		}
	}
	for _, id := range exhausted {
		if st, _, _ := jobState(t, pool, id); st != pg.StatusFailed {
			t.Fatalf("exhausted job %s", st)
		}
	}
}

// A handler that fails on its own while the worker shuts down gets its
// failure recorded: the job ends FAILED with the handler's code and the
// attempt charged, not released as if shutdown had stopped it (issue 12,
// defect 6). A handler that stops because of the shutdown is still released.
func TestShutdownDoesNotMaskAHandlersOwnFailure(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	// Two kinds, two test handlers: ETL jobs fail on their own, diagnostic
	// jobs stop because the worker stops.
	failing := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindETLRecords, Payload: `{}`})[0]
	stopping := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: `{}`})[0]
	started := make(chan struct{}, 2)
	handlers := map[string]worker.Handler{
		pg.KindETLRecords: func(hctx context.Context, _ *lease.Claim) (worker.Output, error) {
			started <- struct{}{}
			<-hctx.Done()
			return worker.Output{}, worker.Permanent(codes.TargetFailure, errors.New("own failure"))
		},
		pg.KindDiagnostic: func(hctx context.Context, _ *lease.Claim) (worker.Output, error) {
			started <- struct{}{}
			<-hctx.Done()
			return worker.Output{}, context.Cause(hctx)
		},
	}
	cfg := fastConfig()
	cfg.Concurrency = 2
	cfg.ShutdownGrace = 10 * time.Millisecond
	h := newWorkerWith(t, url, cfg, worker.TestHooks{}, harnessOptions{handlers: handlers})
	h.start(t)
	for range 2 {
		receive(t, 30*time.Second, "handlers did not start", started)
	}
	if err := h.w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st, attempts, code := jobState(t, pool, failing); st != pg.StatusFailed || attempts != 1 || code == nil || *code != codes.TargetFailure {
		t.Fatalf("failing job %s attempt %d code %v, want FAILED etl_target_failure on attempt 1", st, attempts, code)
	}
	wantJob(t, pool, stopping, pg.StatusPending, 0)
}
