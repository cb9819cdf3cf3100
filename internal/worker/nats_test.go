package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/natstest"
	"github.com/mightyetl/mightyetl/internal/outbox"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
	"github.com/mightyetl/mightyetl/internal/worker"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// startRelay runs the outbox relay for pool on nc under prefix until the test ends.
func startRelay(t *testing.T, pool *pgxpool.Pool, nc *nats.Conn, prefix string) {
	t.Helper()
	r, err := outbox.New(pool, nc, prefix, nil, metrics.NewOutbox(prometheus.NewRegistry()), outbox.Options{PollInterval: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
}

// subscribe wires a worker to wake-ups and revocations like worker.Process does.
func subscribe(t *testing.T, nc *nats.Conn, prefix string, w *worker.Worker) {
	t.Helper()
	if _, err := events.SubscribeWakeups(nc, prefix, nil, w.Wake); err != nil {
		t.Fatal(err)
	}
	if _, err := events.SubscribeRevocations(nc, prefix, nil, w.Revoke); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// startNATSWorker starts pool's outbox relay and a worker of cfg on url
// subscribed to its wake-ups and revocations, on the shared test NATS server
// under a subject prefix of the test's own.
func startNATSWorker(t *testing.T, pool *pgxpool.Pool, url string, cfg worker.Config) *harness {
	t.Helper()
	nc := natstest.Connect(t, natstest.URL(t))
	prefix := natstest.Prefix(t)
	startRelay(t, pool, nc, prefix)
	h := newWorker(t, url, cfg, worker.TestHooks{})
	subscribe(t, nc, prefix, h.w)
	h.start(t)
	return h
}

// cancelJob cancels a fixture job (owner pgtest.DefaultFixtureOwner) by the
// product statement, as the intake does: the job ends CANCELLED with its
// lifecycle and, when it was RUNNING, revocation outbox rows.
func cancelJob(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) {
	t.Helper()
	out, err := pg.CancelJob(context.Background(), pool, pg.CancelParams{PrincipalScopeHash: pgtest.SHA(pgtest.DefaultFixtureOwner),
		JobID: id, CancellationKeyHash: pgtest.SHA("cancel-key")})
	if err != nil || !out.Cancelled {
		t.Fatalf("cancel: %+v %v", out, err)
	}
}

// cancelWhileRunning inserts a minute-long job, cancels it once h runs it,
// waits until h's handler stopped as cancelled, and returns its id.
func cancelWhileRunning(t *testing.T, h *harness, pool *pgxpool.Pool) uuid.UUID {
	t.Helper()
	id := pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(time.Minute, "", 1)})[0]
	testwait.For(t, 20*time.Second, "running", func() bool { return h.w.Running() == 1 })
	cancelJob(t, pool, id)
	h.awaitOutcome(t, 20*time.Second, "handler cancelled", metrics.OutcomeCancelled, 1)
	return id
}

func TestWakeupDeliversJobLongBeforePoll(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	cfg := fastConfig()
	cfg.PollInterval = 30 * time.Second
	h := startNATSWorker(t, pool, url, cfg)
	// After the producer's start-up claim round only a wake-up (or a poll
	// 30s away) can bring the job.
	if n := <-h.sig.Claimed; n != 0 {
		t.Fatalf("start-up claim took %d jobs from an empty queue", n)
	}
	start := time.Now()
	pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(1, "wake")})
	h.awaitOutcome(t, 20*time.Second, "job succeeded via wake-up", metrics.OutcomeSucceeded, 1)
	if elapsed := time.Since(start); elapsed >= 30*time.Second {
		t.Fatalf("job took %v: it waited for the poll", elapsed)
	}
	if testutil.ToFloat64(h.m.WakeupsReceived) < 1 {
		t.Fatal("no wake-up received")
	}
}

func TestCancelledRunningJobStopsThroughNATSRevocation(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	h := startNATSWorker(t, pool, url, fastConfig()) // renewals every 10s: a stop within a second came from NATS
	id := cancelWhileRunning(t, h, pool)
	if v := testutil.ToFloat64(h.m.ClaimsLost.WithLabelValues(metrics.LostRevoked)); v != 1 {
		t.Fatalf("lost via revocation %v, want 1", v)
	}
	t.Logf("cancel commit to handler stop, NATS up: %.1f ms", cancelToStop(t, h)*1000)
	if testutil.ToFloat64(h.m.Renewals.WithLabelValues(metrics.RenewalStale)) != 0 {
		t.Fatal("a renewal, not the revocation, stopped the handler")
	}
	st, _, _ := jobState(t, pool, id)
	if st != pg.StatusCancelled {
		t.Fatalf("status %s", st)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM processed_data`); n != 0 {
		t.Fatalf("cancelled job loaded %d rows", n)
	}
}

func TestCancelledRunningJobStopsAtNextRenewalWithoutNATS(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	cfg := fastConfig()
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin = 3*time.Second, 500*time.Millisecond, 500*time.Millisecond
	h := newWorker(t, url, cfg, worker.TestHooks{})
	h.start(t)
	id := cancelWhileRunning(t, h, pool)
	if v := testutil.ToFloat64(h.m.ClaimsLost.WithLabelValues(metrics.LostNotRenewed)); v != 1 {
		t.Fatalf("lost via renewal %v, want 1", v)
	}
	t.Logf("cancel commit to handler stop, NATS down (renew interval %v): %.1f ms", cfg.RenewInterval, cancelToStop(t, h)*1000)
	if st, _, _ := jobState(t, pool, id); st != pg.StatusCancelled {
		t.Fatalf("status %s, want CANCELLED preserved", st)
	}
}

// cancelToStop returns the single observed cancellation-to-stop latency in seconds.
func cancelToStop(t *testing.T, h *harness) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "mightyetl_cancellation_to_handler_stop_seconds" {
			hist := mf.GetMetric()[0].GetHistogram()
			if hist.GetSampleCount() != 1 {
				t.Fatalf("cancel-to-stop observed %d times, want 1", hist.GetSampleCount())
			}
			return hist.GetSampleSum()
		}
	}
	t.Fatal("cancel-to-stop histogram missing")
	return 0
}

// With NATS stopped mid-run jobs still complete through polling; once NATS is
// back, wake-ups resume without restarting any process.
func TestNATSOutageFallsBackToPollingAndRecovers(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	srv := natstest.StartServer(t)
	prefix := natstest.Prefix(t)
	connect := func(name string) *nats.Conn {
		nc, err := events.Connect(context.Background(), events.Options{URL: srv.URL(), Name: name, ReconnectWait: 50 * time.Millisecond}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	relayConn, workerConn := connect("relay"), connect("worker")
	startRelay(t, pool, relayConn, prefix)
	cfg := fastConfig()
	cfg.PollInterval = 2 * time.Second
	h := newWorker(t, url, cfg, worker.TestHooks{})
	subscribe(t, workerConn, prefix, h.w)
	h.start(t)

	pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(1, "before")})
	h.awaitOutcome(t, 20*time.Second, "first job", metrics.OutcomeSucceeded, 1)
	// The worker's first claim at start can take the job before the relay's
	// wake-up arrives; the wake-up still has to arrive while NATS is up.
	testwait.For(t, 20*time.Second, "a wake-up while NATS was up", func() bool { return testutil.ToFloat64(h.m.WakeupsReceived) >= 1 })

	srv.Stop()
	testwait.For(t, 20*time.Second, "clients see the outage", func() bool { return !workerConn.IsConnected() && !relayConn.IsConnected() })
	pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(1, "during")})
	h.awaitOutcome(t, 30*time.Second, "job completes by polling", metrics.OutcomeSucceeded, 2)

	srv.Start()
	testwait.For(t, 30*time.Second, "clients reconnect", func() bool { return workerConn.IsConnected() && relayConn.IsConnected() })
	if err := workerConn.Flush(); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(h.m.WakeupsReceived)
	pgtest.InsertJobs(t, pool, pg.NewJob{Payload: records(1, "after")})
	testwait.For(t, 30*time.Second, "wake-up after recovery", func() bool { return testutil.ToFloat64(h.m.WakeupsReceived) > before })
	h.awaitOutcome(t, 30*time.Second, "third job", metrics.OutcomeSucceeded, 3)
}
