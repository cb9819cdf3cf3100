package worker

import (
	"context"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
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
		res, err := lease.Renew(ctx, w.renew, w.cfg.OwnerID, refs, w.cfg.LeaseDuration)
		cancel()
		if err == nil {
			w.applyRenewals(pending, res, sent)
			return
		}
		w.m.Renewals.WithLabelValues(metrics.RenewalDBError).Add(float64(len(pending)))
		if attempt == 0 {
			w.log.Warn("lease renewal failed; retrying within the safety margin", "error_class", errorClass(err), "claims", len(pending))
		}
		wait := min(time.Duration(100<<min(attempt, 5))*time.Millisecond, w.cfg.RenewInterval/4)
		select {
		case <-time.After(wait):
		case <-w.renewStop:
			// Shutdown: every claim is already finished or released.
			return
		}
	}
}

// renewable snapshots the claims renewal still covers.
func (w *Worker) renewable() []*running {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*running, 0, len(w.live))
	for _, r := range w.live {
		if !r.lost {
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
		held := w.live[r.claim.ClaimID] == r && !r.lost
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

// applyRenewals records one statement's results.
func (w *Worker) applyRenewals(rs []*running, res []lease.Renewal, sent time.Time) {
	for i, r := range rs {
		w.mu.Lock()
		held := w.live[r.claim.ClaimID] == r && !r.lost
		if held && res[i].Renewed {
			r.localDeadline = sent.Add(w.cfg.LeaseDuration)
		}
		w.mu.Unlock()
		if !held {
			// Finished or released meanwhile: renewal no longer concerns it.
			continue
		}
		if res[i].Renewed {
			w.m.Renewals.WithLabelValues(metrics.RenewalRenewed).Inc()
			continue
		}
		w.m.Renewals.WithLabelValues(metrics.RenewalStale).Inc()
		w.markLost(r, metrics.LostNotRenewed, ErrLeaseLost)
	}
}
