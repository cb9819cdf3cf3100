package worker

import (
	"context"
	"errors"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
)

// The wake-up slots (Config.WakeupSlots) and their claim.
//
// Under a backlog the producer's loop claims back to back, each claim of
// many jobs taking tens to hundreds of milliseconds, and with every slot
// busy it cannot claim at all. A wake-up for a light owner's new job used
// to wait for the claim in progress and the next one: the claim in
// progress does not see the job (its snapshot is older) and holds the
// owner's etl_claim_owners row, which it then backs off as found empty, so
// the fair claim after it may pass the owner by too. Measured beside a
// 1,000,000-job backlog at 2,000 slots: the light owner's pickup p99 682 ms
// against 44.9 ms on an empty queue (docs/performance.md, "Many owners").
//
// So a wake-up that finds the loop claiming, or without a free slot, asks
// for an arrivals claim (askArrivals): lease.ClaimArrivals of at most the
// free wake-up slots, run at once on a goroutine of its own (arrivalsLoop)
// beside the loop's claim, in a transaction of its own committed once its
// rows are read (claimCommitted). It takes only the jobs of light owners
// (whose claimable jobs all just arrived), so a backlog never fills the
// wake-up slots, and its candidates need none of the owner rows the
// regular claim holds. At most one arrivals claim runs at a time; requests
// meanwhile coalesce into the next. An idle worker with a free slot leaves
// the wake-up to its loop: one claim, one round trip.

// askArrivals asks for an arrivals claim when this producer has wake-up
// slots and its loop cannot take a wake-up's jobs at once: it is running a
// claim statement (whose snapshot may predate the jobs), or is between the
// claims of a backlog (the next one takes as long), or has no free slot.
// Never blocks.
func (p *Producer) askArrivals() {
	if p.arrivals == nil || (!p.claiming.Load() && !p.backlogged.Load() && p.claims.free() > 0) {
		return
	}
	select {
	case p.express <- struct{}{}:
	default:
	}
}

// arrivalsLoop runs an arrivals claim per request until Stop.
func (p *Producer) arrivalsLoop(ctx context.Context) {
	for {
		select {
		case <-p.stopping:
			return
		case <-p.express:
		}
		p.claimArrivals(ctx)
	}
}

// claimArrivals claims up to the free wake-up slots with lease.ClaimArrivals
// and launches each claim on a wake-up slot, unless the schema gate is
// closed (the loop's verdict, schemaCompatible) or no wake-up slot is free.
func (p *Producer) claimArrivals(ctx context.Context) {
	if !p.schemaAllowed.Load() {
		return
	}
	free := p.claims.reserve(true)
	defer p.claims.release(true)
	if free <= 0 {
		return
	}
	sent := time.Now()
	cctx, span := tracing.Start(ctx, "worker.claim_arrivals", attribute.Int("batch.limit", free))
	res, err := claimCommitted(cctx, p.db, p.cfg.StatementTimeout, p.arrivals, lease.ClaimParams{
		OwnerID: p.cfg.OwnerID, Limit: free, LeaseDuration: p.cfg.LeaseDuration,
	})
	tracing.EndBatch(span, len(res.Claimed), err)
	switch {
	case errors.Is(err, errCommitUnknown):
		// Kept: their exact leases decide (claimCommitted).
		p.log.Warn("arrivals claim commit unconfirmed; keeping the claims, their leases decide", "error_class", pg.ErrorClass(err))
	case err != nil:
		if ctx.Err() == nil {
			p.log.Warn("arrivals claim failed; will retry at the next wake-up or poll", "error_class", pg.ErrorClass(err))
		}
		return
	}
	p.m.WakeupClaims.Inc()
	p.sig.arrivals.signal(len(res.Claimed))
	if res.Exhausted > 0 {
		p.m.Outcomes.WithLabelValues(metrics.OutcomeFailed).Add(float64(res.Exhausted))
	}
	if len(res.Claimed) > 0 {
		p.m.WakeupJobs.Add(float64(len(res.Claimed)))
		p.m.ClaimBatchSize.Observe(float64(len(res.Claimed)))
		p.m.Outcomes.WithLabelValues(metrics.OutcomeClaimed).Add(float64(len(res.Claimed)))
		for i := range res.Claimed {
			p.runner.launch(res.Claimed[i], sent, true)
		}
	}
}
