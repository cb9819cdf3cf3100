package worker

import (
	"context"
	"slices"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
)

// renewer extends every live claim once per RenewInterval, on its own
// goroutine and its own pool. It is a fixed-rate schedule independent of the
// handlers: a handler that runs for hours never delays it.
func (w *Worker) renewer() {
	defer w.renewWG.Done()
	t := time.NewTicker(w.cfg.RenewInterval)
	defer t.Stop()
	scheduled := time.Now().Add(w.cfg.RenewInterval)
	for {
		select {
		case <-w.renewStop:
			return
		case <-w.recheckKick:
			w.recheckRevoked()
		case now := <-t.C:
			if lag := now.Sub(scheduled); lag > 0 {
				w.m.RenewalLag.Observe(lag.Seconds())
			} else {
				w.m.RenewalLag.Observe(0)
			}
			w.RenewOnce()
			scheduled = time.Now().Add(w.cfg.RenewInterval)
		}
	}
}

// guard is how much of the conservative lease the renewer keeps in hand: a
// claim whose renewal could not be confirmed is declared lost this long
// before the worker's own (already early) view of its expiry.
func (w *Worker) guard() time.Duration { return min(time.Second, w.cfg.SafetyMargin/4) }

// RenewOnce runs one renewal round for every live claim: one statement for
// all of them. A claim the database did not renew is lost at once (its
// handler is cancelled with ErrLeaseLost and never renewed again). A database
// error is retried with backoff only while some claim still has time by the
// worker's conservative clock; a claim whose time runs out is declared lost
// (fail closed), never assumed renewed. Exported for tests.
func (w *Worker) RenewOnce() {
	if w.hooks.BeforeRenew != nil {
		w.hooks.BeforeRenew()
	}
	pending := w.renewable()
	if len(pending) == 0 {
		return
	}
	minMargin := time.Until(pending[0].localDeadline)
	for _, r := range pending[1:] {
		minMargin = min(minMargin, time.Until(r.localDeadline))
	}
	w.m.RenewalMargin.Observe(max(minMargin, 0).Seconds())
	w.renewClaims(pending, true)
}

// renewClaims renews pending in one statement and records the results. A
// claim the database did not renew is lost; a claim whose row another
// transaction held locked (busy) is tried again shortly. With retry (a
// scheduled round), a database error is retried with backoff while some
// claim still has time. Without (a revocation's check), one statement is
// all: a claim it finds gone is lost as revoked (ErrRevoked), and anything
// it could not decide is left to the next scheduled round.
func (w *Worker) renewClaims(pending []*running, retry bool) {
	for attempt := 0; len(pending) > 0; attempt++ {
		// Fail closed: claims without time left are lost, not renewed.
		pending = w.dropExpired(pending)
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
		timeout := min(w.cfg.RenewInterval, time.Until(earliest)-w.guard())
		ctx, cancel := context.WithTimeout(w.lifeCtx, max(timeout, 10*time.Millisecond))
		sent := time.Now()
		ctx, span := tracing.Start(ctx, "worker.renew", attribute.Int("batch.size", len(refs)), attribute.Int("attempt", attempt+1))
		res, err := lease.Renew(ctx, w.renew, w.cfg.OwnerID, refs, w.cfg.LeaseDuration)
		tracing.EndBatch(span, len(res), err)
		cancel()
		var wait time.Duration
		if err == nil {
			pending = w.applyRenewals(pending, res, sent, !retry)
			if len(pending) == 0 || !retry {
				return
			}
			// Busy rows: another transaction (a cancellation, a claim
			// looking at an expiring lease) held them for a moment. Those
			// that can wait for the next round do; the rest are tried
			// again shortly, never past their deadline (dropExpired).
			pending = slices.DeleteFunc(pending, func(r *running) bool {
				w.mu.Lock()
				defer w.mu.Unlock()
				return time.Until(r.localDeadline) > 2*w.cfg.RenewInterval+w.guard()
			})
			if len(pending) == 0 {
				return
			}
			wait = min(50*time.Millisecond, w.cfg.RenewInterval/4)
		} else {
			w.m.Renewals.WithLabelValues(metrics.RenewalDBError).Add(float64(len(pending)))
			if !retry {
				return
			}
			if attempt == 0 {
				w.log.Warn("lease renewal failed; retrying within the safety margin", "error_class", errorClass(err), "claims", len(pending))
			}
			wait = min(time.Duration(100<<min(attempt, 5))*time.Millisecond, w.cfg.RenewInterval/4)
		}
		select {
		case <-time.After(wait):
		case <-w.renewStop:
			// Shutdown: every claim is already finished or released.
			return
		}
	}
}

// recheckRevoked renews, at once and once, the claims revocations named:
// a lease the database still holds is renewed and its handler goes on; one
// it no longer holds is lost, its handler cancelled with ErrRevoked.
func (w *Worker) recheckRevoked() {
	w.mu.Lock()
	pending := make([]*running, 0, len(w.recheck))
	for r := range w.recheck {
		delete(w.recheck, r)
		if w.renewsLocked(r) {
			pending = append(pending, r)
		}
	}
	w.mu.Unlock()
	w.renewClaims(pending, false)
}

// renewsLocked reports whether renewal covers r (w.mu held): it is live,
// not lost, not in a completer's hands and not timed out.
func (w *Worker) renewsLocked(r *running) bool {
	return w.live[r.claim.ClaimID] == r && !r.lost && !r.finishing && !r.timedOut
}

// renewable snapshots the claims renewal still covers.
func (w *Worker) renewable() []*running {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*running, 0, len(w.live))
	for _, r := range w.live {
		if w.renewsLocked(r) {
			out = append(out, r)
		}
	}
	return out
}

// dropExpired declares lost every claim whose conservative deadline is within
// the guard and returns the rest.
func (w *Worker) dropExpired(rs []*running) []*running {
	keep := rs[:0]
	for _, r := range rs {
		w.mu.Lock()
		gone := time.Until(r.localDeadline) <= w.guard()
		held := w.renewsLocked(r)
		w.mu.Unlock()
		switch {
		case !held:
		case gone:
			w.markLost(r, metrics.LostMarginGone, ErrLeaseLost)
		default:
			keep = append(keep, r)
		}
	}
	return keep
}

// applyRenewals records one statement's results and returns the claims
// that were busy (not renewed this time, still held by the database).
// A claim handed to a completer meanwhile is left alone: its finish decides,
// and a lease that the finish ended is not stale.
func (w *Worker) applyRenewals(rs []*running, res []lease.Renewal, sent time.Time, revoked bool) []*running {
	var busy []*running
	for i, r := range rs {
		w.mu.Lock()
		held := w.renewsLocked(r)
		if held && res[i].Renewed {
			r.localDeadline = sent.Add(w.cfg.LeaseDuration)
		}
		w.mu.Unlock()
		switch {
		case !held:
			// Finished, released or finishing meanwhile: renewal no longer concerns it.
		case res[i].Renewed:
			w.m.Renewals.WithLabelValues(metrics.RenewalRenewed).Inc()
		case res[i].Busy:
			busy = append(busy, r)
		case revoked:
			// Counted as a loss by revocation, not as a stale renewal.
			w.markLost(r, metrics.LostRevoked, ErrRevoked)
		default:
			w.m.Renewals.WithLabelValues(metrics.RenewalStale).Inc()
			w.markLost(r, metrics.LostNotRenewed, ErrLeaseLost)
		}
	}
	return busy
}
