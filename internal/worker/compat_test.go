package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/health"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// awaitGate reads the worker's schema-gate signal until it reports want.
func awaitGate(t *testing.T, h *harness, want bool, what string) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case v := <-h.sig.SchemaGate:
			if v == want {
				return
			}
		case <-deadline.C:
			t.Fatalf("timed out waiting for the schema gate to report %t (%s)", want, what)
		}
	}
}

// The idle-old-worker case of issue 30: a worker started against a
// compatible schema sits idle; the schema then moves to a version whose
// compatibility row requires a higher binary level. The worker stops
// claiming (a job inserted afterwards stays PENDING, never attempted) and
// /readyz reports not ready, instead of claiming and failing the job. Once
// the schema admits its level again, it claims and runs the job.
func TestIdleWorkerStopsClaimingWhenTheSchemaNeedsANewerBinary(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	cfg := fastConfig()
	cfg.SchemaCheckInterval = time.Nanosecond // check before every claim round
	h := newWorker(t, url, cfg, worker.TestHooks{})
	h.start(t)
	awaitGate(t, h, true, "compatible at start")
	if r := health.NotReady(ctx, pool); r != "" {
		t.Fatalf("readyz at a compatible schema: %q", r)
	}

	next := pg.MaxSchemaVersion + 1
	pgtest.SetFutureSchema(t, pool, next, pg.BinaryCompatLevel+1)
	awaitGate(t, h, false, "schema needs a newer binary")
	if r := health.NotReady(ctx, pool); r != "schema version incompatible" {
		t.Fatalf("readyz at an incompatible schema: %q", r)
	}
	// Claim signals so far were sent before the gate closed.
	for len(h.sig.Claimed) > 0 {
		<-h.sig.Claimed
	}

	id := pgtest.InsertJobs(t, pool, pg.NewJob{})[0]
	// Two full gate checks after the insert committed: each is a claim
	// round (the poll runs every 20 ms) that claimed nothing.
	awaitGate(t, h, false, "first round after the insert")
	awaitGate(t, h, false, "second round after the insert")
	select {
	case n := <-h.sig.Claimed:
		t.Fatalf("a claim statement ran (claimed %d) while the schema was incompatible", n)
	default:
	}
	wantJob(t, pool, id, pg.StatusPending, 0)

	pgtest.SetFutureSchema(t, pool, next, pg.BinaryCompatLevel)
	awaitGate(t, h, true, "schema admits this binary again")
	h.awaitOutcome(t, 30*time.Second, "the job to succeed once compatible", metrics.OutcomeSucceeded, 1)
	wantJob(t, pool, id, pg.StatusSucceeded, 1)
	if r := health.NotReady(ctx, pool); r != "" {
		t.Fatalf("readyz at a newer compatible schema: %q", r)
	}
}
