package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/outbox"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// startRecorder wraps the diagnostic handler to record, per job, when the
// handler started and the claim's database-measured pickup delay.
type startRecorder struct {
	mu     sync.Mutex
	starts map[uuid.UUID]startRec
}

type startRec struct {
	at     time.Time
	pickup time.Duration
}

func newStartRecorder() *startRecorder {
	return &startRecorder{starts: map[uuid.UUID]startRec{}}
}

func (s *startRecorder) handlers() map[string]worker.Handler {
	hs := worker.DefaultHandlers(1000)
	diag := hs[pg.KindDiagnostic]
	hs[pg.KindDiagnostic] = func(ctx context.Context, c *lease.Claim) (worker.Output, error) {
		now := time.Now()
		s.mu.Lock()
		s.starts[c.JobID] = startRec{at: now, pickup: c.PickupDelay}
		s.mu.Unlock()
		return diag(ctx, c)
	}
	return hs
}

func (s *startRecorder) get(id uuid.UUID) (startRec, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.starts[id]
	return r, ok
}

// Pickup variants.
const (
	// pickupAnnounced: as the intake does with its own NATS connection
	// (natsbridge: Service.SetAnnouncer): pg.InsertJobsUnannounced, then
	// one wake-up published on NATS once the insert has committed.
	pickupAnnounced = "nats-announced"
	// pickupRelay: as an intake without NATS: pg.InsertJobs writes the
	// job_available outbox row and the relay (LISTEN, then its own
	// transaction) publishes the wake-up.
	pickupRelay    = "nats-relay"
	pickupPollOnly = "poll-only"
)

// pickup runs the NATS wake-up variants (when -nats-url is set) and the
// polling-only variant.
func (h *harness) pickup(ctx context.Context) ([]Result, error) {
	var out []Result
	variants := []string{pickupPollOnly}
	if h.o.NATSURL != "" {
		variants = []string{pickupAnnounced, pickupRelay, pickupPollOnly}
	}
	for _, v := range variants {
		r, err := h.pickupRun(ctx, v)
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// natsWiring is the in-process relay and the worker's wake-up subscription.
type natsWiring struct {
	nc     *nats.Conn
	relay  *outbox.Relay
	pool   *pgxpool.Pool
	prefix string
}

func (h *harness) wireNATS(ctx context.Context, w *worker.Worker) (*natsWiring, error) {
	nc, err := events.Connect(ctx, events.Options{URL: h.o.NATSURL, Name: "mightyetl-bench"}, nil, nil)
	if err != nil {
		return nil, err
	}
	if err := waitUntil(ctx, 10*time.Second, 20*time.Millisecond, "NATS connection", func() (bool, error) {
		return nc.IsConnected(), nil
	}); err != nil {
		nc.Close()
		return nil, err
	}
	n := &natsWiring{nc: nc, prefix: "mightyetl_bench_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")}
	n.pool, err = pg.NewPool(ctx, h.url, pg.PoolOptions{MaxConns: 4, ApplicationName: "mightyetl-bench-relay"})
	if err != nil {
		nc.Close()
		return nil, err
	}
	n.relay, err = outbox.New(n.pool, nc, n.prefix, h.log, metrics.NewOutbox(nil), outbox.Options{})
	if err == nil {
		err = n.relay.Start(ctx)
	}
	if err == nil {
		_, err = events.SubscribeWakeups(nc, n.prefix, nil, w.Wake)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		n.close(ctx)
		return nil, err
	}
	return n, nil
}

// close stops the relay, deletes this run's lifecycle stream and closes NATS.
func (n *natsWiring) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if n.relay != nil {
		_ = n.relay.Stop(ctx)
	}
	if js, err := jetstream.New(n.nc); err == nil {
		if s, err := events.NewSubjects(n.prefix); err == nil {
			_ = js.DeleteStream(ctx, s.LifecycleStream())
		}
	}
	n.nc.Close()
	n.pool.Close()
}

// pickupRun submits one job at a time at -rate for -pickup-duration to a
// default-configured worker (8 slots, poll 1s) and measures
// submit-committed-to-handler-start and available-to-claimed latency.
func (h *harness) pickupRun(ctx context.Context, variant string) (Result, error) {
	res := Result{System: "mightyetl", Scenario: "pickup", Variant: variant, Metrics: map[string]float64{},
		Settings: map[string]string{"rate_per_s": strconv.FormatFloat(h.o.Rate, 'f', -1, 64),
			"duration": h.o.PickupDuration.String(), "worker": "defaults (8 slots, poll 1s, lease 30s)"}}
	if err := h.fresh(ctx); err != nil {
		return res, err
	}
	rec := newStartRecorder()
	rg, err := h.startWorker(ctx, worker.Config{}, rec.handlers(), 0)
	if err != nil {
		return res, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = rg.stop(stopCtx)
	}()
	var announce func() // nil: the insert writes the job_available outbox row
	if variant != pickupPollOnly {
		nw, err := h.wireNATS(ctx, rg.w)
		if err != nil {
			return res, fmt.Errorf("wire NATS: %w", err)
		}
		defer nw.close(ctx)
		res.Settings["wakeups"] = "outbox relay (LISTEN) -> NATS <prefix>.jobs.available -> Worker.Wake"
		if variant == pickupAnnounced {
			announce = nw.relay.AnnounceAvailable
			res.Settings["wakeups"] = "pg.InsertJobsUnannounced, then NATS <prefix>.jobs.available after the commit (as the intake with NATS) -> Worker.Wake"
		}
	}
	// Warm up connections and caches; not measured.
	if _, err := h.submitPaced(ctx, rec, 5, 10*time.Millisecond, announce); err != nil {
		return res, err
	}
	n := max(1, int(h.o.Rate*h.o.PickupDuration.Seconds()))
	committed, err := h.submitPaced(ctx, rec, n, time.Duration(float64(time.Second)/h.o.Rate), announce)
	if err != nil {
		return res, err
	}
	var e2e, avail []time.Duration
	for id, at := range committed {
		s, _ := rec.get(id)
		e2e = append(e2e, max(s.at.Sub(at), 0))
		avail = append(avail, s.pickup)
	}
	percentiles("submit_to_start", e2e, res.Metrics)
	percentiles("available_to_claimed", avail, res.Metrics)
	res.Metrics["jobs"] = float64(n)
	if err := waitUntil(ctx, 30*time.Second, 10*time.Millisecond, "pickup jobs to succeed", func() (bool, error) {
		return rg.outcomes(metrics.OutcomeSucceeded) >= float64(n+5), nil
	}); err != nil {
		return res, err
	}
	return res, nil
}

// submitPaced inserts n jobs one at a time (each its own commit), one every
// interval, and waits until every handler started. It returns each job's
// commit-acknowledged time. With announce, each insert writes no
// job_available outbox row and announce runs after its commit, as the
// intake's group commit does with an announcer.
func (h *harness) submitPaced(ctx context.Context, rec *startRecorder, n int, interval time.Duration, announce func()) (map[uuid.UUID]time.Time, error) {
	committed := make(map[uuid.UUID]time.Time, n)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		jobs := h.newJobs(1, zeroPayload)
		var err error
		if announce != nil {
			_, err = pg.InsertJobsUnannounced(ctx, h.pool, jobs)
		} else {
			err = h.insertJobs(ctx, jobs)
		}
		if err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
		committed[jobs[0].JobID] = time.Now()
		if announce != nil {
			announce()
		}
	}
	err := waitUntil(ctx, 30*time.Second, 5*time.Millisecond, "every submitted job to start", func() (bool, error) {
		for id := range committed {
			if _, ok := rec.get(id); !ok {
				return false, nil
			}
		}
		return true, nil
	})
	return committed, err
}
