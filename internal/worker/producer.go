package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
)

// launcher runs claimed jobs: the producer's only way to hand work on.
// launch must not block (the producer never claims more than the claim set
// has room for); wakeup puts the claim on a wake-up slot.
type launcher interface {
	launch(c lease.Claim, sent time.Time, wakeup bool)
}

// Producer is the worker role that claims jobs (lease.ClaimJobs) whenever slots are free and a
// reason to look arrives: a wake-up, a freed slot, or the poll interval.
// Start it once and Stop it once (startstop); Stop returns when no claim
// statement runs any more.
type Producer struct {
	base   startstop.Base
	cfg    *Config
	db     *pgxpool.Pool
	claims *claimSet
	runner launcher
	m      *metrics.Worker
	log    *slog.Logger
	sig    *testSignals

	// wake carries advisory wake-ups: written (never blocking, coalesced)
	// by wakeUp from any goroutine, read by the producer loop.
	wake chan struct{}
	// stopping is closed by Stop: read by the loop and by runOnce between
	// claim statements.
	stopping chan struct{}
	// claim is the claim statement: lease.ClaimJobs, or
	// lease.ClaimChunkedJobs for the chunked producer.
	claim claimFunc
	// arrivals is the claim of the wake-up slots (lease.ClaimArrivals; see
	// claimArrivals); nil when the worker has none (Config.WakeupSlots).
	arrivals claimFunc
	// express asks for an arrivals claim: written (never blocking,
	// coalesced) by askArrivals, read by the arrivals goroutine.
	express chan struct{}
	// claiming is true while the loop runs a regular claim statement, and
	// backlogged while its last claim came back full (a backlog: the loop
	// claims again as soon as slots free).
	claiming, backlogged atomic.Bool
	// schemaAllowed is the schema gate's verdict (schemaOK) for the
	// arrivals goroutine.
	schemaAllowed atomic.Bool

	// Schema gate, owned by the loop goroutine: schemaChecked is when
	// pg.CheckCompatibility last answered (zero: never), schemaOK its
	// verdict.
	schemaChecked time.Time
	schemaOK      bool
}

func newProducer(cfg *Config, db *pgxpool.Pool, claims *claimSet, runner launcher, m *metrics.Worker, log *slog.Logger, sig *testSignals) *Producer {
	p := &Producer{cfg: cfg, db: db, claims: claims, runner: runner, m: m, log: log, sig: sig,
		wake: make(chan struct{}, 1), stopping: make(chan struct{}), claim: lease.ClaimJobs,
		express: make(chan struct{}, 1)}
	if cfg.WakeupSlots > 0 {
		p.arrivals = lease.ClaimArrivals
	}
	return p
}

// wakeUp asks the producer to claim now, and for an arrivals claim when
// the loop cannot take the wake-up's jobs at once (askArrivals: asked
// first, so that it reads the loop as the wake-up found it, not claiming
// for this very wake-up). Never blocks.
func (p *Producer) wakeUp() {
	p.askArrivals()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Start launches the claim loop and the arrivals goroutine; claims run
// under a context detached from ctx's cancellation and cancelled by Stop,
// once neither runs a claim statement any more.
func (p *Producer) Start(ctx context.Context) error {
	return p.base.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		return startstop.Loop(p.stopping, func() {
			var arrivals sync.WaitGroup
			if p.arrivals != nil {
				arrivals.Go(func() { p.arrivalsLoop(ctx) })
			}
			p.loop(ctx)
			arrivals.Wait()
		}, cancel), nil
	})
}

// Stop stops claiming and waits for the loop (startstop semantics).
func (p *Producer) Stop(ctx context.Context) error { return p.base.Stop(ctx) }

// Done is closed once Stop finished (startstop.Base.Done).
func (p *Producer) Done() <-chan struct{} { return p.base.Done() }

func (p *Producer) loop(ctx context.Context) {
	poll := time.NewTicker(p.cfg.PollInterval)
	defer poll.Stop()
	cooldown := time.NewTimer(time.Hour)
	cooldown.Stop()
	for {
		p.runOnce(ctx)
		select {
		case <-p.stopping:
			return
		case <-p.wake:
		case <-p.claims.slotFree:
			// Slots free one by one as handlers return: wait ClaimCooldown
			// so the next claim takes the slots freed meanwhile in one
			// statement (River's FetchCooldown). A wake-up or poll (new
			// jobs) does not wait: pickup latency stays a round trip.
			if p.cfg.ClaimCooldown > 0 {
				cooldown.Reset(p.cfg.ClaimCooldown)
				select {
				case <-p.stopping:
					cooldown.Stop()
					return
				case <-p.wake:
				case <-cooldown.C:
				}
				cooldown.Stop()
			}
		case <-poll.C:
			// No wake-up may come (NATS down or not used): the poll looks
			// for arrivals too when the loop has no free slot.
			p.askArrivals()
		}
	}
}

// schemaCompatible reports whether this binary may claim against the
// database's schema, re-reading pg.CheckCompatibility once
// Config.SchemaCheckInterval passed since the last answer (and at the first
// round). It logs one line naming both versions when the verdict changes
// (and at the first incompatible answer), never per round. A check that
// fails keeps the last verdict (none yet: not compatible) and is retried at
// the next round.
func (p *Producer) schemaCompatible(ctx context.Context) bool {
	if !p.schemaChecked.IsZero() && time.Since(p.schemaChecked) < p.cfg.SchemaCheckInterval {
		return p.schemaOK
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
	c, err := pg.CheckCompatibility(cctx, p.db)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("schema compatibility check failed; will retry at the next poll", "error_class", pg.ErrorClass(err))
		}
		return p.schemaOK
	}
	first := p.schemaChecked.IsZero()
	p.schemaChecked = time.Now()
	if c.Compatible != p.schemaOK || (first && !c.Compatible) {
		if c.Compatible {
			p.log.Info("schema compatible; claiming", "schema_version", c.Applied,
				"binary_compat_level", pg.BinaryCompatLevel, "schema_range", fmt.Sprintf("%d..%d", pg.MinSchemaVersion, pg.MaxSchemaVersion))
		} else {
			p.log.Error("schema incompatible; not claiming: "+c.Reason, "schema_version", c.Applied,
				"binary_compat_level", pg.BinaryCompatLevel, "required_binary_level", c.RequiredBinary)
		}
	}
	p.schemaOK = c.Compatible
	p.schemaAllowed.Store(c.Compatible)
	p.sig.schemaGate.signal(c.Compatible)
	return p.schemaOK
}

// runOnce claims up to the free slots and launches each claim, unless the
// schema is incompatible (schemaCompatible). Claiming repeats while full
// batches come back, so a backlog drains without waiting for the poll.
func (p *Producer) runOnce(ctx context.Context) {
	if !p.schemaCompatible(ctx) {
		return
	}
	for {
		select {
		case <-p.stopping:
			return
		default:
		}
		free := p.claims.reserve(false)
		if free <= 0 {
			p.claims.release(false)
			return
		}
		sent := time.Now()
		// Committed only once its rows are read, so a claim given up on
		// never commits unseen (claimCommitted).
		cctx, span := tracing.Start(ctx, "worker.claim", attribute.Int("batch.limit", free))
		// A wake-up meanwhile finds the loop busy: an arrivals claim takes
		// what it announced (askArrivals).
		p.claiming.Store(true)
		res, err := claimCommitted(cctx, p.db, p.cfg.StatementTimeout, p.claim, lease.ClaimParams{
			OwnerID: p.cfg.OwnerID, Limit: free, LeaseDuration: p.cfg.LeaseDuration,
			Owners: max(p.cfg.ClaimOwners, 0),
		})
		p.claiming.Store(false)
		tracing.EndBatch(span, len(res.Claimed), err)
		switch {
		case errors.Is(err, errCommitUnknown):
			// Kept: their exact leases decide (claimCommitted).
			p.log.Warn("claim commit unconfirmed; keeping the claims, their leases decide", "error_class", pg.ErrorClass(err))
		case err != nil:
			p.claims.release(false)
			if ctx.Err() == nil {
				p.log.Warn("claim failed; will retry at the next poll or wake-up", "error_class", pg.ErrorClass(err))
			}
			return
		}
		p.backlogged.Store(len(res.Claimed)+res.Exhausted >= free)
		p.sig.claimed.signal(len(res.Claimed))
		if res.Exhausted > 0 {
			p.m.Outcomes.WithLabelValues(metrics.OutcomeFailed).Add(float64(res.Exhausted))
		}
		if len(res.Claimed) > 0 {
			p.m.ClaimBatchSize.Observe(float64(len(res.Claimed)))
			p.m.Outcomes.WithLabelValues(metrics.OutcomeClaimed).Add(float64(len(res.Claimed)))
			for i := range res.Claimed {
				p.runner.launch(res.Claimed[i], sent, false)
			}
		}
		p.claims.release(false)
		// Exhausted leases took candidates too: a batch that came back full
		// counting them may have left claimable jobs behind.
		if len(res.Claimed)+res.Exhausted < free {
			return
		}
		// Claim again at once only while at least half the slots are idle
		// (a backlog meeting a mostly empty worker). Otherwise let the slots
		// that free meanwhile gather for ClaimCooldown: short jobs finish
		// during the claim round trip, and claiming for each handful at once
		// split the slots into cohorts of half a batch, doubling the claims
		// per job (measured at 8 slots: 4.0 jobs per claim, 8 after).
		if idle := p.claims.free(); idle*2 < p.cfg.Concurrency {
			return
		}
	}
}
