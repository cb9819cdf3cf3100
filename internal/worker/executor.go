package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/client/backoff"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/tracing"
	"go.opentelemetry.io/otel/trace"
)

// minWriteBackoff and maxWriteBackoff bound the wait between tries of a
// fenced write that failed transiently: 50ms doubling with every try, at most
// 1s (and never past the lease, sleepWithinLease).
const (
	minWriteBackoff = 50 * time.Millisecond
	maxWriteBackoff = time.Second
)

// finisher commits successful results in finish groups: the executor pool's
// only way to the completers.
type finisher interface {
	// finish commits r's output and returns nil when its lease won,
	// lease.ErrLost when it did not (nothing was written for it), or the
	// error that kept the group from committing.
	finish(r *running, out Output) error
}

// ExecutorPool is the worker role that runs launched claims to their
// outcome on a fixed pool of
// maxLive() goroutines: at most Concurrency running handlers (plus the
// wake-up slots'), the rest
// settling outcomes (retry, failure, release, or waiting for a completer).
// A fixed pool replaces a goroutine per job: the stacks stay grown, so a job
// costs no goroutine creation or stack growth (measured in the burndown
// profile as a tenth of the worker's CPU).
//
// Start it before the producer and Stop it after: Stop waits up to
// ShutdownGrace (or until its context ends) for the running claims, cancels
// the rest with ErrShutdown, waits for them to release, and stops the
// goroutines.
type ExecutorPool struct {
	base     startstop.Base
	cfg      *Config
	db       *pgxpool.Pool
	claims   *claimSet
	done     finisher
	handlers map[string]Handler
	m        *metrics.Worker
	log      *slog.Logger
	sig      *testSignals

	// ctx is the pool's life: handler contexts derive from it and fenced
	// writes run under it; cancelled once the pool stopped.
	ctx context.Context
	// runQ hands launched claims to the executor goroutines: written by
	// launch on the producer goroutine (never more than maxLive() claims are
	// live, so it never blocks), read by the maxLive() executor goroutines,
	// closed by Stop once every claim has settled.
	runQ chan *running
	// inflight counts launched claims until their outcome settled.
	inflight sync.WaitGroup

	// failJob, when set, writes the fenced terminal failure of r with code
	// instead of lease.Fail (chunked jobs: lease.FailChunked); herr is the
	// handler's error (nil for a failure the executor decided).
	failJob func(ctx context.Context, r *running, code string, herr error) error
	// settled, when set, runs after a claim settled (forgotten by the claim
	// set, its renewal over) with its outcome.
	settled func(r *running, outcome string)
}

func newExecutorPool(cfg *Config, db *pgxpool.Pool, claims *claimSet, done finisher, handlers map[string]Handler,
	m *metrics.Worker, log *slog.Logger, sig *testSignals) *ExecutorPool {
	return &ExecutorPool{cfg: cfg, db: db, claims: claims, done: done, handlers: handlers, m: m, log: log, sig: sig,
		runQ: make(chan *running, cfg.maxLive())}
}

// Start launches the executor goroutines.
func (e *ExecutorPool) Start(ctx context.Context) error {
	return e.base.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		e.ctx = ctx
		var pool sync.WaitGroup
		for range e.cfg.maxLive() {
			pool.Add(1)
			go func() {
				defer pool.Done()
				for r := range e.runQ {
					e.execute(r.ctx, r)
				}
			}()
		}
		return func(ctx context.Context) error {
			settled := make(chan struct{})
			go func() { e.inflight.Wait(); close(settled) }()
			grace := time.NewTimer(e.cfg.ShutdownGrace)
			select {
			case <-settled:
			case <-grace.C:
			case <-ctx.Done():
			}
			grace.Stop()
			// Cancel whatever still runs; executors release their claims.
			e.claims.cancelAll(ErrShutdown)
			<-settled
			close(e.runQ)
			pool.Wait()
			cancel()
			return nil
		}, nil
	})
}

// Stop drains the pool (startstop semantics; see executorPool).
func (e *ExecutorPool) Stop(ctx context.Context) error { return e.base.Stop(ctx) }

// Done is closed once Stop finished (startstop.Base.Done).
func (e *ExecutorPool) Done() <-chan struct{} { return e.base.Done() }

// launch records a claim (on a wake-up slot when wakeup) and queues it for
// an executor.
func (e *ExecutorPool) launch(c lease.Claim, sent time.Time, wakeup bool) {
	// The exemplar is the submit's trace: a slow pickup leads to the job.
	var submit trace.SpanContext
	if c.SubmitTraceparent != "" {
		submit, _ = tracing.ParseTraceparent(c.SubmitTraceparent)
	}
	tracing.Observe(e.m.PickupLatency, c.PickupDelay.Seconds(), submit)
	ctx, cancel := context.WithCancelCause(e.ctx)
	r := &running{claim: c, localDeadline: sent.Add(e.cfg.LeaseDuration), ctx: ctx, cancel: cancel, started: time.Now(), wakeup: wakeup}
	r.timer = time.AfterFunc(e.cfg.MaxJobDuration, func() { e.claims.timeOut(r) })
	if old := e.claims.add(r); old != nil {
		e.claims.markLost(old, metrics.LostSuperseded, ErrLeaseLost)
	}
	e.inflight.Add(1)
	e.runQ <- r
}

// execute runs one claim to its outcome and settles it.
func (e *ExecutorPool) execute(ctx context.Context, r *running) {
	defer e.inflight.Done()
	var outcome string
	if e.settled != nil {
		defer func() { e.settled(r, outcome) }()
	}
	defer e.claims.settle(r)
	c := &r.claim
	// One span per execution, from claim to settled outcome. Claims are
	// batched, so it is a root span, not the claim batch's child.
	ctx, span := tracing.StartExecution(ctx, c.Kind, c.Attempt, c.SubmitTraceparent)
	defer span.End()

	out, herr := e.runHandler(ctx, c)
	returned := time.Now()
	if e.sig.beforeFinish != nil {
		e.sig.beforeFinish(c)
	}
	// The handler is done: its slot may run another job while this claim's
	// outcome commits (the claim stays live and renewed until settled).
	// After the test pause, so a test that pauses a finish also holds the
	// slot.
	e.claims.freeSlot(r)

	switch {
	case herr == nil:
		outcome = e.fencedWrite(r, metrics.OutcomeSucceeded, func(context.Context) error {
			// The completer bounds the finish transaction with StatementTimeout.
			return e.done.finish(r, out)
		})
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrJobTimeout):
		// Past MaxJobDuration: whatever the handler returned on its way
		// out, the attempt ends the job (rerunning it would take as long).
		e.log.Warn("job ran past its maximum duration; the job fails", "job_kind", c.Kind)
		outcome = e.fencedWrite(r, metrics.OutcomeFailed, func(ctx context.Context) error {
			return e.fail(ctx, r, codes.JobTimeout, nil)
		})
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrShutdown) && stoppedByCancel(herr):
		outcome = e.fencedWrite(r, metrics.OutcomeReleased, func(ctx context.Context) error {
			return lease.Release(ctx, e.db, c.Ref)
		})
	case ctx.Err() != nil && (errors.Is(context.Cause(ctx), ErrLeaseLost) || errors.Is(context.Cause(ctx), ErrRevoked)):
		// Authority is gone: write nothing, find out why.
		outcome = e.classifyLost(r)
	case errors.Is(herr, lease.ErrLost):
		// A fenced write of the handler's own (a chunk transaction)
		// matched nothing: authority is gone; write nothing more.
		e.claims.markLost(r, metrics.LostFencedWrite, ErrLeaseLost)
		outcome = e.classifyLost(r)
	default:
		outcome = e.finishFailure(r, herr)
	}
	if outcome == metrics.OutcomeCancelled {
		e.observeCancelToStop(r, returned)
	}
	tracing.SetOutcome(span, outcome)
	if outcome != "" {
		e.m.Outcomes.WithLabelValues(outcome).Inc()
		tracing.Observe(e.m.ExecutionSeconds.WithLabelValues(outcome), time.Since(r.started).Seconds(), span.SpanContext())
	}
	e.sig.outcome.signal(outcome)
}

// stoppedByCancel reports whether a handler's error is its context ending
// (the cause it was cancelled with, or the plain context errors), as opposed
// to a failure of its own that happened to coincide with a shutdown: such a
// failure is recorded, not hidden behind a release that refunds the attempt.
func stoppedByCancel(herr error) bool {
	return errors.Is(herr, ErrShutdown) || errors.Is(herr, context.Canceled) || errors.Is(herr, context.DeadlineExceeded)
}

// runHandler calls the kind's handler, turning a panic into an internal failure.
func (e *ExecutorPool) runHandler(ctx context.Context, c *lease.Claim) (out Output, err error) {
	h := e.handlers[c.Kind]
	if h == nil {
		return Output{}, Permanent(codes.InternalError, errors.New("no handler for job kind"))
	}
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("handler panicked", "job_kind", c.Kind)
			out, err = Output{}, Permanent(codes.InternalError, fmt.Errorf("handler panic"))
		}
	}()
	return h(ctx, c)
}

// finishFailure retries a transient failure while attempts remain, and fails
// the job otherwise.
func (e *ExecutorPool) finishFailure(r *running, herr error) string {
	c := &r.claim
	var fe *Error
	if !errors.As(herr, &fe) {
		if isTransientDB(herr) {
			fe = &Error{Code: codes.TargetUnavailable, Transient: true, Err: herr}
		} else {
			fe = &Error{Code: codes.InternalError, Err: herr}
		}
	}
	if fe.Transient && c.Attempt < c.MaxAttempts {
		delay := backoff.Full(e.cfg.RetryBaseDelay, e.cfg.RetryMaxDelay, c.Attempt)
		return e.fencedWrite(r, metrics.OutcomeRetried, func(ctx context.Context) error {
			return lease.Retry(ctx, e.db, c.Ref, delay)
		})
	}
	code := fe.Code
	if fe.Transient {
		code = codes.TargetUnavailable
	}
	return e.fencedWrite(r, metrics.OutcomeFailed, func(ctx context.Context) error {
		return e.fail(ctx, r, code, herr)
	})
}

// fail writes the fenced terminal failure of r with code: failJob when
// set, lease.Fail otherwise.
func (e *ExecutorPool) fail(ctx context.Context, r *running, code string, herr error) error {
	if e.failJob != nil {
		return e.failJob(ctx, r, code, herr)
	}
	return lease.Fail(ctx, e.db, r.claim.Ref, code)
}

// fencedWrite runs one fenced statement until it lands or cannot:
//   - zero rows (lease.ErrLost) is final: the loss is classified and the
//     write never repeated; but after a transient failure, a success found
//     committed at this claim's attempt (ownWrite: the earlier try committed
//     and its answer was lost) counts as the success;
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
func (e *ExecutorPool) fencedWrite(r *running, success string, write func(ctx context.Context) error) string {
	// retried: an earlier try failed transiently, and may have committed
	// without its answer reaching the worker (ownWrite).
	retried := false
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(e.ctx, e.cfg.StatementTimeout)
		err := write(ctx)
		cancel()
		switch {
		case err == nil:
			return success
		case errors.Is(err, lease.ErrLost):
			if retried && e.ownWrite(r, success) {
				return success
			}
			e.claims.markLost(r, metrics.LostFencedWrite, ErrLeaseLost)
			return e.classifyLost(r)
		case e.ctx.Err() != nil:
			return ""
		case !isTransientDB(err):
			if success == metrics.OutcomeSucceeded {
				e.log.Warn("the target refused the job's rows; the job fails", "error_class", pg.ErrorClass(err))
				return e.fencedWrite(r, metrics.OutcomeFailed, func(ctx context.Context) error {
					return e.fail(ctx, r, codes.TargetFailure, nil)
				})
			}
			e.log.Warn("fenced write failed; the claim is abandoned to expire", "error_class", pg.ErrorClass(err))
			return ""
		}
		retried = true
		if e.sig.writeFailed != nil {
			e.sig.writeFailed()
		}
		if !e.sleepWithinLease(r, backoff.Capped(minWriteBackoff, maxWriteBackoff, i+1)) {
			if e.ownWrite(r, success) {
				return success
			}
			e.log.Warn("fenced write failed until the lease ran out; the claim is abandoned to expire", "error_class", pg.ErrorClass(err))
			return ""
		}
	}
}

// ownWrite reports whether an earlier try of r's success write, whose
// answer was lost, committed: the job is SUCCEEDED at r's own attempt,
// which only this claim's success can leave (every later claim counts one
// more attempt). Other writes are never recognised: a job FAILED at r's
// attempt may also have been failed by another worker's claim
// (attempts exhausted), and retries and releases leave no final state. A
// job that cannot be read is not recognised either.
func (e *ExecutorPool) ownWrite(r *running, success string) bool {
	if success != metrics.OutcomeSucceeded {
		return false
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.StatementTimeout)
	defer cancel()
	ok, err := lease.SucceededAt(ctx, e.db, r.claim.JobID, r.claim.Attempt)
	return err == nil && ok
}

// sleepWithinLease waits d unless that would pass the claim's conservative
// deadline minus the renewer's guard, the claim is lost, or the worker is
// being torn down; it reports whether it waited.
func (e *ExecutorPool) sleepWithinLease(r *running, d time.Duration) bool {
	deadline, lost := e.claims.deadline(r)
	if lost || time.Until(deadline) < d+e.cfg.guard() {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.ctx.Done():
		return false
	}
}

// classifyLost reads why a lease was lost: cancelled when the job is now
// CANCELLED, stale otherwise.
func (e *ExecutorPool) classifyLost(r *running) string {
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	st, err := lease.InspectLost(ctx, e.db, r.claim.JobID)
	r.sinceCancel = st.SinceCancelled
	if err == nil && st.Status == pg.StatusCancelled {
		return metrics.OutcomeCancelled
	}
	return metrics.OutcomeStale
}

func (e *ExecutorPool) observeCancelToStop(r *running, returned time.Time) {
	// sinceCancel was read after the handler returned; subtract that gap.
	d := r.sinceCancel - time.Since(returned)
	if d < 0 {
		d = 0
	}
	e.m.CancelToStop.Observe(d.Seconds())
}

// isTransientDB reports a retryable database error.
func isTransientDB(err error) bool { return pg.IsTransient(err) }
