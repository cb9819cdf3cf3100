package worker

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/client/backoff"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
)

// renewRetryBase and renewRetryMax bound the wait between tries of a
// renewal the database failed: 100ms doubling with every try, at most 3.2s
// and at most a quarter of the renew interval.
const (
	renewRetryBase = 100 * time.Millisecond
	renewRetryMax  = 3200 * time.Millisecond
)

// Renewer is the worker role that extends every live claim once per
// RenewInterval with one
// statement, on its own goroutine and its own pool. It is a fixed-rate
// schedule independent of the handlers: a handler that runs for hours never
// delays it. It also confirms, at once, the claims revocations name.
//
// Start it before the executor pool and Stop it after: renewal never stops
// while a claim is held, and never runs for a claim the worker abandoned.
type Renewer struct {
	base   startstop.Base
	cfg    *Config
	db     *pgxpool.Pool // the renewal pool, never the execution pool
	claims *claimSet
	m      *metrics.Worker
	log    *slog.Logger
	sig    *testSignals

	// ctx is the renewer's life: renewal statements run under it;
	// cancelled once the renewer stopped.
	ctx context.Context
	// recheckKick wakes the renewer for the claims queued in
	// claims.recheck: written (never blocking, coalesced) by recheckSoon
	// from any goroutine, read by the renewer loop.
	recheckKick chan struct{}
	// stopping is closed by Stop: read by the loop and by the retry waits
	// of renewClaims.
	stopping chan struct{}
}

func newRenewer(cfg *Config, db *pgxpool.Pool, claims *claimSet, m *metrics.Worker, log *slog.Logger, sig *testSignals) *Renewer {
	return &Renewer{cfg: cfg, db: db, claims: claims, m: m, log: log, sig: sig,
		recheckKick: make(chan struct{}, 1), stopping: make(chan struct{})}
}

// Start launches the renewal loop.
func (rn *Renewer) Start(ctx context.Context) error {
	return rn.base.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		rn.ctx = ctx
		return startstop.Loop(rn.stopping, rn.loop, cancel), nil
	})
}

// Stop stops renewing and waits for the loop (startstop semantics).
func (rn *Renewer) Stop(ctx context.Context) error { return rn.base.Stop(ctx) }

// Done is closed once Stop finished (startstop.Base.Done).
func (rn *Renewer) Done() <-chan struct{} { return rn.base.Done() }

// recheckSoon wakes the renewer for the queued rechecks. Never blocks.
func (rn *Renewer) recheckSoon() {
	select {
	case rn.recheckKick <- struct{}{}:
	default:
	}
}

func (rn *Renewer) loop() {
	t := time.NewTicker(rn.cfg.RenewInterval)
	defer t.Stop()
	scheduled := time.Now().Add(rn.cfg.RenewInterval)
	for {
		select {
		case <-rn.stopping:
			return
		case <-rn.recheckKick:
			rn.renewClaims(rn.claims.takeRechecks(), false)
		case now := <-t.C:
			if lag := now.Sub(scheduled); lag > 0 {
				rn.m.RenewalLag.Observe(lag.Seconds())
			} else {
				rn.m.RenewalLag.Observe(0)
			}
			rn.renewOnce()
			scheduled = time.Now().Add(rn.cfg.RenewInterval)
		}
	}
}

// guard is how much of the conservative lease the renewer keeps in hand: a
// claim whose renewal could not be confirmed is declared lost this long
// before the worker's own (already early) view of its expiry.
func (c *Config) guard() time.Duration { return min(time.Second, c.SafetyMargin/4) }

// renewOnce runs one renewal round for every live claim: one statement for
// all of them. A claim the database did not renew is lost at once (its
// handler is cancelled with ErrLeaseLost and never renewed again). A database
// error is retried with backoff only while some claim still has time by the
// worker's conservative clock; a claim whose time runs out is declared lost
// (fail closed), never assumed renewed.
func (rn *Renewer) renewOnce() {
	if rn.sig.beforeRenew != nil {
		rn.sig.beforeRenew()
	}
	rn.sig.renewRound.signal(struct{}{})
	pending := rn.claims.renewable()
	if len(pending) == 0 {
		return
	}
	minMargin := time.Until(pending[0].localDeadline)
	for _, r := range pending[1:] {
		minMargin = min(minMargin, time.Until(r.localDeadline))
	}
	rn.m.RenewalMargin.Observe(max(minMargin, 0).Seconds())
	rn.renewClaims(pending, true)
}

// renewClaims renews pending in one statement and records the results. A
// claim the database did not renew is lost; a claim whose row another
// transaction held locked (busy) is tried again shortly. With retry (a
// scheduled round), a database error is retried with backoff while some
// claim still has time. Without (a revocation's check), one statement is
// all: a claim it finds gone is lost as revoked (ErrRevoked), and anything
// it could not decide is left to the next scheduled round.
func (rn *Renewer) renewClaims(pending []*running, retry bool) {
	for attempt := 0; len(pending) > 0; attempt++ {
		// Fail closed: claims without time left are lost, not renewed.
		pending = rn.dropExpired(pending)
		if len(pending) == 0 {
			return
		}
		earliest := pending[0].localDeadline
		refs := make([]lease.Ref, len(pending))
		for i, r := range pending {
			refs[i] = r.claim.Ref
			if r.localDeadline.Before(earliest) {
				earliest = r.localDeadline
			}
		}
		timeout := min(rn.cfg.RenewInterval, time.Until(earliest)-rn.cfg.guard())
		ctx, cancel := context.WithTimeout(rn.ctx, max(timeout, 10*time.Millisecond))
		sent := time.Now()
		ctx, span := tracing.Start(ctx, "worker.renew", attribute.Int("batch.size", len(refs)), attribute.Int("attempt", attempt+1))
		res, err := lease.Renew(ctx, rn.db, rn.cfg.OwnerID, refs, rn.cfg.LeaseDuration)
		tracing.EndBatch(span, len(res), err)
		cancel()
		var wait time.Duration
		if err == nil {
			pending = rn.applyRenewals(pending, res, sent, !retry)
			if len(pending) > 0 {
				rn.sig.renewBusy.signal(len(pending))
			}
			if len(pending) == 0 || !retry {
				return
			}
			// Busy rows: another transaction (a cancellation, a claim
			// looking at an expiring lease) held them for a moment. Those
			// that can wait for the next round do; the rest are tried
			// again shortly, never past their deadline (dropExpired).
			pending = slices.DeleteFunc(pending, func(r *running) bool {
				rn.claims.mu.Lock()
				defer rn.claims.mu.Unlock()
				return time.Until(r.localDeadline) > 2*rn.cfg.RenewInterval+rn.cfg.guard()
			})
			if len(pending) == 0 {
				return
			}
			wait = min(50*time.Millisecond, rn.cfg.RenewInterval/4)
		} else {
			rn.m.Renewals.WithLabelValues(metrics.RenewalDBError).Add(float64(len(pending)))
			if !retry {
				return
			}
			if attempt == 0 {
				rn.log.Warn("lease renewal failed; retrying within the safety margin", "error_class", pg.ErrorClass(err), "claims", len(pending))
			}
			wait = backoff.Capped(renewRetryBase, min(renewRetryMax, rn.cfg.RenewInterval/4), attempt+1)
		}
		select {
		case <-time.After(wait):
		case <-rn.stopping:
			// Shutdown: every claim is already finished or released.
			return
		}
	}
}

// dropExpired declares lost every claim whose conservative deadline is within
// the guard and returns the rest. A finishing claim out of time is only
// dropped from this round, not declared lost: its finish is in flight, the
// database's fence decides it, and the executor stops retrying a failed
// finish by the same deadline (sleepWithinLease).
func (rn *Renewer) dropExpired(rs []*running) []*running {
	keep := rs[:0]
	for _, r := range rs {
		rn.claims.mu.Lock()
		gone := time.Until(r.localDeadline) <= rn.cfg.guard()
		held := rn.claims.renewsLocked(r)
		finishing := r.finishing
		rn.claims.mu.Unlock()
		switch {
		case !held:
		case gone && finishing:
		case gone:
			rn.claims.markLost(r, metrics.LostMarginGone, ErrLeaseLost)
		default:
			keep = append(keep, r)
		}
	}
	return keep
}

// applyRenewals records one statement's results and returns the claims
// that were busy (not renewed this time, still held by the database).
// A claim that settled meanwhile is left alone. A finishing claim is
// renewed like any other (a finish that keeps failing keeps its lease),
// and is busy while its finish transaction holds the row; but when the
// statement matched nothing the finish may have committed and ended the
// lease, so that is neither stale nor a revocation: the finish decides.
func (rn *Renewer) applyRenewals(rs []*running, res []lease.Renewal, sent time.Time, revoked bool) []*running {
	var busy []*running
	for i, r := range rs {
		rn.claims.mu.Lock()
		held := rn.claims.renewsLocked(r)
		finishing := r.finishing
		if held && res[i].Renewed {
			r.localDeadline = sent.Add(rn.cfg.LeaseDuration)
		}
		rn.claims.mu.Unlock()
		switch {
		case !held:
			// Settled, released or lost meanwhile: renewal no longer concerns it.
		case res[i].Renewed:
			rn.m.Renewals.WithLabelValues(metrics.RenewalRenewed).Inc()
		case res[i].Busy:
			busy = append(busy, r)
		case finishing:
			// Ended by its own finish's commit, or lost: the finish's
			// fenced write tells (lease.ErrLost) and counts the loss.
		case revoked:
			// Counted as a loss by revocation, not as a stale renewal.
			rn.claims.markLost(r, metrics.LostRevoked, ErrRevoked)
		default:
			rn.m.Renewals.WithLabelValues(metrics.RenewalStale).Inc()
			rn.claims.markLost(r, metrics.LostNotRenewed, ErrLeaseLost)
		}
	}
	return busy
}
