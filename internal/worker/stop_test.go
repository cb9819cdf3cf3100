package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
	"github.com/mightyetl/mightyetl/internal/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// stubborn is a handler that ignores cancellation: it waits for its context
// to end, reports that, and then keeps running until the test releases it.
type stubborn struct {
	started   chan struct{} // one value when the handler starts
	cancelled chan struct{} // one value when its context ended
	release   chan struct{} // closed by the test (and always at cleanup)
	once      sync.Once
}

func newStubborn() *stubborn {
	return &stubborn{started: make(chan struct{}, 1), cancelled: make(chan struct{}, 1), release: make(chan struct{})}
}

func (s *stubborn) open() { s.once.Do(func() { close(s.release) }) }

func (s *stubborn) handler(ctx context.Context, _ *lease.Claim) (worker.Output, error) {
	s.started <- struct{}{}
	<-ctx.Done()
	s.cancelled <- struct{}{}
	<-s.release
	return worker.Output{}, context.Cause(ctx)
}

// startStubborn starts a worker running one stubborn job.
func startStubborn(t *testing.T) (*harness, *stubborn) {
	t.Helper()
	pool, url := pgtest.NewDatabase(t)
	pgtest.InsertJobs(t, pool, pg.NewJob{Kind: pg.KindDiagnostic, Payload: diagnostic(0, "", 0)})
	s := newStubborn()
	cfg := fastConfig()
	cfg.ShutdownGrace = time.Hour // only the caller's context ends the wait
	h := newWorkerWith(t, url, cfg, worker.TestHooks{}, harnessOptions{handlers: map[string]worker.Handler{pg.KindDiagnostic: s.handler}})
	// Cleanups run last-in first-out: the handler is released before the
	// final Stop waits for it.
	t.Cleanup(func() { _ = h.w.Stop(context.Background()) })
	t.Cleanup(s.open)
	if err := h.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	receive(t, 30*time.Second, "the stubborn job never started", s.started)
	return h, s
}

// stopCutShort calls Stop on a context that ends at once and waits until
// the stubborn handler's context ended; the channel gets Stop's result.
func stopCutShort(t *testing.T, h *harness, s *stubborn) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- h.w.Stop(ctx) }()
	cancel()
	receive(t, 30*time.Second, "the handler's context was never cancelled", s.cancelled)
	return stopped
}

// Defect (issue 17): Worker.Stop waited unconditionally for handlers that
// ignore cancellation, so a caller's deadline could not bound it. Stop now
// returns ctx.Err() when the caller's context ends; the stop goes on.
func TestStopReturnsWhenTheCallersContextEndsWhileAHandlerIgnoresCancellation(t *testing.T) {
	t.Parallel() // startStubborn gives each test its own database
	h, s := startStubborn(t)
	stopped := stopCutShort(t, h, s)
	if err := receive(t, 30*time.Second, "Stop blocked on a handler that ignores cancellation after its context ended", stopped); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop returned %v, want context.Canceled", err)
	}
	// The stop went on in the background: once the handler returns, a later
	// Stop waits for it and reports success.
	s.open()
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	if err := h.w.Stop(sctx); err != nil {
		t.Fatalf("Stop after the handler returned: %v", err)
	}
}

// Defect (issue 17): Worker.Stop's result (stopErr) was never assigned, so a
// Stop cut short by its caller's context reported success.
func TestStopCutShortByItsContextReportsIt(t *testing.T) {
	t.Parallel() // startStubborn gives each test its own database
	h, s := startStubborn(t)
	stopped := stopCutShort(t, h, s)
	// Let the handler return, so even a Stop that waits for it returns.
	s.open()
	if err := receive(t, time.Minute, "Stop did not return", stopped); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop whose context ended before the handlers did returned %v, want context.Canceled", err)
	}
}

// Defect (issue 17): Start wrote the started flag and Stop read it without a
// lock; under -race a concurrent Start and Stop is reported, and a Stop that
// won left a later Start's goroutines running forever (goleak).
func TestConcurrentStartAndStopAreSafe(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	for range 5 {
		h := newWorker(t, url, fastConfig(), worker.TestHooks{})
		gate := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); <-gate; _ = h.w.Start(context.Background()) }()
		go func() { defer wg.Done(); <-gate; _ = h.w.Stop(context.Background()) }()
		close(gate)
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := h.w.Stop(ctx); err != nil {
			cancel()
			t.Fatalf("final Stop: %v", err)
		}
		cancel()
		// Whoever won, the worker is stopped for good.
		if err := h.w.Start(context.Background()); err == nil {
			t.Fatal("Start after Stop succeeded")
		}
	}
}

// Every user of startstop runs the shared stress test.
func TestWorkerStartStopStress(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDatabase(t)
	exec := pgtest.NewPool(t, url, 8)
	renew := pgtest.NewPool(t, url, 2)
	startstoptest.Stress(t, func(t *testing.T) startstop.Service {
		return worker.New(fastConfig(), exec, renew, worker.DefaultHandlers(100), metrics.NewWorker(prometheus.NewRegistry()), nil)
	}, time.Minute)
}
