package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// maxWriteBackoff caps the wait between tries of a fenced write that failed
// with a transient database error.
const maxWriteBackoff = time.Second

// execute runs one claim to its outcome and frees its slot.
func (w *Worker) execute(ctx context.Context, r *running) {
	defer w.execWG.Done()
	defer w.done(r)
	c := &r.claim
	// One span per execution, from claim to settled outcome. Claims are
	// batched, so it is a root span, not the claim batch's child.
	ctx, span := tracing.StartExecution(ctx, c.Kind, c.Attempt, c.SubmitTraceparent)
	defer span.End()

	out, herr := w.runHandler(ctx, c)
	returned := time.Now()
	if w.hooks.BeforeFinish != nil {
		w.hooks.BeforeFinish(c)
	}
	// The handler is done: its slot may run another job while this claim's
	// outcome commits (the claim stays live and renewed until done). After
	// the test hook, so a test that pauses a finish also holds the slot.
	w.freeSlot(r)

	var outcome string
	switch {
	case herr == nil:
		outcome = w.finishSuccess(r, out)
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrJobTimeout):
		// Past MaxJobDuration: whatever the handler returned on its way
		// out, the attempt ends the job (rerunning it would take as long).
		w.log.Warn("job ran past its maximum duration; the job fails", "job_kind", c.Kind)
		outcome = w.fencedWrite(r, metrics.OutcomeFailed, func(ctx context.Context) error {
			return lease.Fail(ctx, w.exec, c.Ref, CodeJobTimeout)
		})
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrShutdown) && stoppedByCancel(herr):
		outcome = w.fencedWrite(r, metrics.OutcomeReleased, func(ctx context.Context) error {
			return lease.Release(ctx, w.exec, c.Ref)
		})
	case ctx.Err() != nil && (errors.Is(context.Cause(ctx), ErrLeaseLost) || errors.Is(context.Cause(ctx), ErrRevoked)):
		// Authority is gone: write nothing, find out why.
		outcome = w.classifyLost(r)
	default:
		outcome = w.finishFailure(r, herr)
	}
	if outcome == metrics.OutcomeCancelled {
		w.observeCancelToStop(r, returned)
	}
	tracing.SetOutcome(span, outcome)
	if outcome != "" {
		w.m.Outcomes.WithLabelValues(outcome).Inc()
		tracing.Observe(w.m.ExecutionSeconds.WithLabelValues(outcome), time.Since(r.started).Seconds(), span.SpanContext())
	}
}

// stoppedByCancel reports whether a handler's error is its context ending
// (the cause it was cancelled with, or the plain context errors), as opposed
// to a failure of its own that happened to coincide with a shutdown: such a
// failure is recorded, not hidden behind a release that refunds the attempt.
func stoppedByCancel(herr error) bool {
	return errors.Is(herr, ErrShutdown) || errors.Is(herr, context.Canceled) || errors.Is(herr, context.DeadlineExceeded)
}

// runHandler calls the kind's handler, turning a panic into an internal failure.
func (w *Worker) runHandler(ctx context.Context, c *lease.Claim) (out Output, err error) {
	h := w.handlers[c.Kind]
	if h == nil {
		return Output{}, Permanent(CodeInternalError, errors.New("no handler for job kind"))
	}
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("handler panicked", "job_kind", c.Kind)
			out, err = Output{}, Permanent(CodeInternalError, fmt.Errorf("handler panic"))
		}
	}()
	return h(ctx, c)
}

// finishFailure retries a transient failure while attempts remain, and fails
// the job otherwise.
func (w *Worker) finishFailure(r *running, herr error) string {
	c := &r.claim
	var fe *Error
	if !errors.As(herr, &fe) {
		if isTransientDB(herr) {
			fe = &Error{Code: CodeTargetUnavailable, Transient: true, Err: herr}
		} else {
			fe = &Error{Code: CodeInternalError, Err: herr}
		}
	}
	if fe.Transient && c.Attempt < c.MaxAttempts {
		delay := backoff(w.cfg.RetryBaseDelay, w.cfg.RetryMaxDelay, c.Attempt)
		return w.fencedWrite(r, metrics.OutcomeRetried, func(ctx context.Context) error {
			return lease.Retry(ctx, w.exec, c.Ref, delay)
		})
	}
	code := fe.Code
	if fe.Transient {
		code = CodeTargetUnavailable
	}
	return w.fencedWrite(r, metrics.OutcomeFailed, func(ctx context.Context) error {
		return lease.Fail(ctx, w.exec, c.Ref, code)
	})
}

// fencedWrite runs one fenced statement until it lands or cannot:
//   - zero rows (lease.ErrLost) is final: the loss is classified and the
//     write never repeated;
//   - a transient database error (a failover, a broken connection, a
//     timeout) is tried again with backoff for as long as the lease is ours
//     by the worker's conservative clock, which renewal keeps extending
//     while the database answers it; when that time runs out, or the worker
//     is torn down, the claim is abandoned to expire (nothing was written,
//     so the next attempt redoes the job);
//   - any other error is deterministic: trying again cannot help. A success
//     the target refused (a constraint or trigger rejecting a row) fails the
//     job at once with etl_target_failure, by a fenced write on this attempt;
//     another write that fails so is abandoned to expire.
func (w *Worker) fencedWrite(r *running, success string, write func(ctx context.Context) error) string {
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(w.lifeCtx, w.cfg.StatementTimeout)
		err := write(ctx)
		cancel()
		switch {
		case err == nil:
			return success
		case errors.Is(err, lease.ErrLost):
			w.markLost(r, metrics.LostFencedWrite, ErrLeaseLost)
			return w.classifyLost(r)
		case w.lifeCtx.Err() != nil:
			return ""
		case !isTransientDB(err):
			if success == metrics.OutcomeSucceeded {
				w.log.Warn("the target refused the job's rows; the job fails", "error_class", errorClass(err))
				return w.fencedWrite(r, metrics.OutcomeFailed, func(ctx context.Context) error {
					return lease.Fail(ctx, w.exec, r.claim.Ref, CodeTargetFailure)
				})
			}
			w.log.Warn("fenced write failed; the claim is abandoned to expire", "error_class", errorClass(err))
			return ""
		}
		if w.hooks.WriteFailed != nil {
			w.hooks.WriteFailed()
		}
		if !w.sleepWithinLease(r, min(time.Duration(50<<min(i, 5))*time.Millisecond, maxWriteBackoff)) {
			w.log.Warn("fenced write failed until the lease ran out; the claim is abandoned to expire", "error_class", errorClass(err))
			return ""
		}
	}
}

// sleepWithinLease waits d unless that would pass the claim's conservative
// deadline minus the renewer's guard, the claim is lost, or the worker is
// being torn down; it reports whether it waited.
func (w *Worker) sleepWithinLease(r *running, d time.Duration) bool {
	w.mu.Lock()
	deadline, lost := r.localDeadline, r.lost
	w.mu.Unlock()
	if lost || time.Until(deadline) < d+w.guard() {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.lifeCtx.Done():
		return false
	}
}

// classifyLost reads why a lease was lost: cancelled when the job is now
// CANCELLED, stale otherwise.
func (w *Worker) classifyLost(r *running) string {
	ctx, cancel := context.WithTimeout(w.lifeCtx, 5*time.Second)
	defer cancel()
	st, err := lease.InspectLost(ctx, w.exec, r.claim.JobID)
	r.sinceCancel = st.SinceCancelled
	if err == nil && st.Status == pg.StatusCancelled {
		return metrics.OutcomeCancelled
	}
	return metrics.OutcomeStale
}

func (w *Worker) observeCancelToStop(r *running, returned time.Time) {
	// sinceCancel was read after the handler returned; subtract that gap.
	d := r.sinceCancel - time.Since(returned)
	if d < 0 {
		d = 0
	}
	w.m.CancelToStop.Observe(d.Seconds())
}

// isTransientDB reports a retryable database error.
func isTransientDB(err error) bool { return pg.IsTransient(err) }
