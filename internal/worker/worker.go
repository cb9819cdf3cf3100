package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Config tunes a Worker. Validate it with internal/config before use; New
// fills zero values with the defaults noted.
type Config struct {
	// OwnerID identifies this worker in lease_owner_id ([A-Za-z0-9._:-]{8,128}).
	OwnerID string
	// Concurrency is the number of execution slots (default 8).
	Concurrency int
	// PollInterval is the fallback claim interval when no wake-up arrives (default 1s).
	PollInterval time.Duration
	// LeaseDuration is each lease's length from the database clock (default 30s).
	LeaseDuration time.Duration
	// RenewInterval is the renewal period for all live claims (default 10s).
	RenewInterval time.Duration
	// SafetyMargin is the minimum lease time the worker keeps in hand (default 5s);
	// used by configuration validation.
	SafetyMargin time.Duration
	// RetryBaseDelay and RetryMaxDelay bound the full-jitter exponential
	// backoff of transient failures (defaults 1s and 5m).
	RetryBaseDelay, RetryMaxDelay time.Duration
	// ShutdownGrace is how long Stop waits for running handlers before
	// cancelling and releasing them (default 30s).
	ShutdownGrace time.Duration
	// FinishBatch is the most jobs one finish transaction commits (default 256).
	FinishBatch int
	// Completers is the number of concurrent finish transactions (default 2).
	Completers int
	// ClaimCooldown is how long the producer lets freed slots accumulate
	// before claiming for them (default 1ms; negative: claim at once). A
	// wake-up for new jobs never waits for it.
	ClaimCooldown time.Duration
	// FinishLinger is how long a completer that has fewer than FinishBatch
	// results waits for more before committing (default 2ms; negative: no
	// wait). A result's slot is already free while it waits, so the linger
	// trades a little completion latency for fewer, larger commits, as
	// River's batch completer does on its 50 ms tick.
	FinishLinger time.Duration
	// MaxBatchRecords bounds records per job when transforming (default 100000).
	MaxBatchRecords int
	// FinishMaxRows and FinishMaxBytes bound one finish group by the target
	// rows it writes and their size, besides FinishBatch jobs (defaults
	// 20,000 rows and 16 MiB): one large job commits alone instead of making
	// a group of small ones time out. A job over the bounds commits alone.
	FinishMaxRows, FinishMaxBytes int
	// StatementTimeout bounds every claim, finish and fenced write (default
	// max(RenewInterval, 5s)); a slower statement is cancelled and counts as
	// a transient database error. Renewal is bounded by its own schedule.
	StatementTimeout time.Duration
	// MaxJobDuration bounds one attempt of a job (default 6h): past it the
	// handler is cancelled with ErrJobTimeout, renewal of the claim stops,
	// and the job ends FAILED etl_job_timeout.
	MaxJobDuration time.Duration
}

// maxLive bounds the claims a worker holds at once: Concurrency running
// handlers plus the claims whose handler returned and whose outcome is
// settling (waiting in a finish group or writing a retry or failure), at
// most max(Concurrency, FinishBatch × Completers) of them, so a full round of
// finish groups never holds back the claims of free slots.
func (c *Config) maxLive() int {
	return c.Concurrency + max(c.Concurrency, c.FinishBatch*c.Completers)
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	def(&c.PollInterval, time.Second)
	def(&c.LeaseDuration, 30*time.Second)
	def(&c.RenewInterval, 10*time.Second)
	def(&c.SafetyMargin, 5*time.Second)
	def(&c.RetryBaseDelay, time.Second)
	def(&c.RetryMaxDelay, 5*time.Minute)
	def(&c.ShutdownGrace, 30*time.Second)
	if c.FinishBatch == 0 {
		c.FinishBatch = 256
	}
	if c.ClaimCooldown == 0 {
		c.ClaimCooldown = time.Millisecond
	}
	if c.FinishLinger == 0 {
		c.FinishLinger = 2 * time.Millisecond
	}
	if c.Completers == 0 {
		c.Completers = 2
	}
	if c.MaxBatchRecords == 0 {
		c.MaxBatchRecords = 100000
	}
	if c.FinishMaxRows == 0 {
		c.FinishMaxRows = 20000
	}
	if c.FinishMaxBytes == 0 {
		c.FinishMaxBytes = 16 << 20
	}
	def(&c.StatementTimeout, max(c.RenewInterval, 5*time.Second))
	def(&c.MaxJobDuration, 6*time.Hour)
	if c.OwnerID == "" {
		c.OwnerID = "worker-" + uuid.NewString()
	}
}

// Worker claims and runs durable jobs. Create it with New, then Start and
// Stop it once. Wake and Revoke may be called from any goroutine at any time.
type Worker struct {
	cfg      Config
	exec     *pgxpool.Pool
	renew    *pgxpool.Pool
	handlers map[string]Handler
	m        *metrics.Worker
	log      *slog.Logger

	wake     chan struct{}
	slotFree chan struct{}
	finishQ  chan *finishReq
	// formMu lets one completer at a time gather a group; carry is the
	// result that did not fit the last group formed (guarded by formMu).
	formMu sync.Mutex
	carry  *finishReq
	// recheck holds the claims a revocation asked the renewer to confirm
	// with the database; recheckKick wakes the renewer for them.
	recheck     map[*running]struct{}
	recheckKick chan struct{}

	mu      sync.Mutex
	live    map[uuid.UUID]*running // claims held now, by claim id
	byJob   map[uuid.UUID]*running // the newest held claim of each job
	running int

	// base runs Start and Stop once each (startstop).
	base       startstop.Base
	lifeCtx    context.Context // cancelled by the final stage of Stop
	lifeCancel context.CancelFunc
	stopClaim  chan struct{}
	producerWG sync.WaitGroup
	execWG     sync.WaitGroup // one per launched claim until execute returns
	// runQ hands launched claims to the executor pool: written by launch
	// (never more than maxLive() claims are live, so it never blocks), read
	// by maxLive() executor goroutines (at most Concurrency running handlers,
	// the rest settling outcomes), closed by Stop once every claim has
	// finished.
	runQ       chan *running
	poolWG     sync.WaitGroup // the executor goroutines
	renewWG    sync.WaitGroup
	finishWG   sync.WaitGroup
	renewStop  chan struct{}
	finishStop chan struct{}

	// testHooks lets tests pause the pipeline at exact points.
	hooks Hooks
}

// Hooks are optional test seams; nil fields do nothing.
type Hooks struct {
	// BeforeFinish runs in the executor after the handler returned and before
	// the result is committed.
	BeforeFinish func(c *lease.Claim)
	// BeforeRenew runs at the start of every renewal round.
	BeforeRenew func()
	// AfterClaim runs after every claim statement with the number claimed.
	AfterClaim func(claimed int)
	// WriteFailed runs when a finish or fenced write failed with a database
	// error (not a lost lease), before it is tried again.
	WriteFailed func()
	// FinishGroup runs in a completer before each finish transaction with
	// the group's jobs and target rows.
	FinishGroup func(jobs, rows int)
	// InFinishTx runs inside each finish transaction after the fenced
	// success locked the won job rows, before the target rows are written.
	InFinishTx func()
}

// running is one held claim.
type running struct {
	claim lease.Claim
	// localDeadline is the worker's conservative view of the lease expiry
	// on its monotonic clock: the moment the claim or renewal statement was
	// sent plus the lease duration. The database expiry is never earlier.
	localDeadline time.Time
	// ctx is the handler's context, cancelled with a cause when the lease is
	// lost, revoked or the worker shuts down; cancel cancels it.
	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   bool // renewal stopped for this claim
	// finishing is true while a completer holds the claim's success (in a
	// group or its transaction, which locks the job row): renewal leaves it
	// alone, so it never waits on the worker's own finish, and a lease the
	// finish ended is not counted stale. Cleared when the finish failed.
	finishing bool
	// timedOut is true once the attempt passed MaxJobDuration: renewal
	// stops, and the job is failed with etl_job_timeout.
	timedOut bool
	// timer fires at MaxJobDuration.
	timer *time.Timer
	// slotHeld is true while the handler runs: the claim holds one of the
	// Concurrency execution slots. The slot is freed as soon as the handler
	// returns; the claim stays live (and renewed) until its outcome commits.
	slotHeld    bool
	started     time.Time
	sinceCancel time.Duration
}

// New creates a worker. exec runs claims and finishes; renew is a separate
// small pool used only by the renewer, so handlers that hold every exec
// connection cannot starve renewal.
func New(cfg Config, exec, renew *pgxpool.Pool, handlers map[string]Handler, m *metrics.Worker, log *slog.Logger) *Worker {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Worker{
		cfg: cfg, exec: exec, renew: renew, handlers: handlers, m: m, log: log,
		wake:        make(chan struct{}, 1),
		slotFree:    make(chan struct{}, 1),
		finishQ:     make(chan *finishReq, cfg.Concurrency),
		recheck:     make(map[*running]struct{}),
		recheckKick: make(chan struct{}, 1),
		runQ:        make(chan *running, cfg.maxLive()),
		live:        make(map[uuid.UUID]*running),
		byJob:       make(map[uuid.UUID]*running),
		stopClaim:   make(chan struct{}),
		renewStop:   make(chan struct{}),
		finishStop:  make(chan struct{}),
	}
}

// SetHooks installs test hooks; call before Start.
func (w *Worker) SetHooks(h Hooks) { w.hooks = h }

// Start launches the producer, renewer and completers and returns at once.
// A second Start returns startstop.ErrAlreadyStarted, a Start after Stop
// startstop.ErrStopped: a worker runs once.
func (w *Worker) Start(ctx context.Context) error {
	return w.base.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		w.lifeCtx, w.lifeCancel = context.WithCancel(context.WithoutCancel(ctx))
		for range w.cfg.Completers {
			w.finishWG.Add(1)
			go w.completer()
		}
		for range w.cfg.maxLive() {
			w.poolWG.Add(1)
			go w.executor()
		}
		w.renewWG.Add(1)
		go w.renewer()
		w.producerWG.Add(1)
		go w.producer()
		w.log.Info("worker started", "concurrency", w.cfg.Concurrency,
			"lease_duration", w.cfg.LeaseDuration.String(), "renew_interval", w.cfg.RenewInterval.String())
		return w.stop, nil
	})
}

// Wake asks the producer to claim now (an advisory wake-up). Never blocks.
func (w *Worker) Wake() {
	w.m.WakeupsReceived.Inc()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Revoke asks the renewer to renew jobID's claim at once, if this worker
// holds one; otherwise it does nothing. A revocation is only a hint (design
// invariant 10): the handler is cancelled with ErrRevoked only when that
// renewal finds the lease gone in the database (the job was cancelled,
// finished or reclaimed). A lease still held is simply renewed. Never blocks.
func (w *Worker) Revoke(jobID uuid.UUID) {
	w.m.RevocationsHeard.Inc()
	w.mu.Lock()
	r, ok := w.byJob[jobID]
	if ok {
		w.recheck[r] = struct{}{}
	}
	w.mu.Unlock()
	if ok {
		select {
		case w.recheckKick <- struct{}{}:
		default:
		}
	}
}

// Running returns how many handlers run now: the claims holding an execution
// slot (a claim whose handler returned holds none while its outcome commits).
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running
}

// Stop stops claiming, waits up to ShutdownGrace (or until ctx ends) for
// running jobs, cancels the rest with ErrShutdown and releases their claims,
// then stops renewal and the completers. When ctx ends first, Stop returns
// ctx.Err() at once and the shutdown goes on in the background (a handler
// that ignores cancellation keeps its claim, renewed, until it returns); a
// later Stop waits for it. Stop before Start returns nil; safe to call more
// than once and concurrently.
func (w *Worker) Stop(ctx context.Context) error { return w.base.Stop(ctx) }

// stop is the worker's shutdown, run once by the first Stop.
func (w *Worker) stop(ctx context.Context) error {
	close(w.stopClaim)
	w.producerWG.Wait()

	done := make(chan struct{})
	go func() { w.execWG.Wait(); close(done) }()
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	select {
	case <-done:
	case <-grace.C:
	case <-ctx.Done():
	}
	grace.Stop()
	// Cancel whatever still runs; executors release their claims.
	w.mu.Lock()
	for _, r := range w.live {
		r.cancel(ErrShutdown)
	}
	w.mu.Unlock()
	<-done
	close(w.runQ)
	w.poolWG.Wait()
	// Only now stop renewing: every claim is finished or released.
	close(w.renewStop)
	w.renewWG.Wait()
	close(w.finishStop)
	w.finishWG.Wait()
	w.lifeCancel()
	w.log.Info("worker stopped")
	return nil
}

// producer claims whenever slots are free and a reason to look arrives.
func (w *Worker) producer() {
	defer w.producerWG.Done()
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	cooldown := time.NewTimer(time.Hour)
	cooldown.Stop()
	for {
		w.runOnce(w.lifeCtx)
		select {
		case <-w.stopClaim:
			return
		case <-w.wake:
		case <-w.slotFree:
			// Slots free one by one as handlers return: wait ClaimCooldown
			// so the next claim takes the slots freed meanwhile in one
			// statement (River's FetchCooldown). A wake-up or poll (new
			// jobs) does not wait: pickup latency stays a round trip.
			if w.cfg.ClaimCooldown > 0 {
				cooldown.Reset(w.cfg.ClaimCooldown)
				select {
				case <-w.stopClaim:
					cooldown.Stop()
					return
				case <-w.wake:
				case <-cooldown.C:
				}
				cooldown.Stop()
			}
		case <-poll.C:
		}
	}
}

// runOnce claims up to the free slots and starts an executor per claim.
// Claiming repeats while full batches come back, so a backlog drains without
// waiting for the poll.
func (w *Worker) runOnce(ctx context.Context) {
	for {
		select {
		case <-w.stopClaim:
			return
		default:
		}
		w.mu.Lock()
		// Concurrency bounds running handlers; claims whose handler returned
		// and whose outcome is settling hold no slot, within maxLive.
		free := min(w.cfg.Concurrency-w.running, w.cfg.maxLive()-len(w.live))
		w.mu.Unlock()
		if free <= 0 {
			return
		}
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, w.cfg.StatementTimeout)
		cctx, span := tracing.Start(cctx, "worker.claim", attribute.Int("batch.limit", free))
		res, err := lease.ClaimJobs(cctx, w.exec, lease.ClaimParams{
			OwnerID: w.cfg.OwnerID, Limit: free, LeaseDuration: w.cfg.LeaseDuration,
		})
		tracing.EndBatch(span, len(res.Claimed), err)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("claim failed; will retry at the next poll or wake-up", "error_class", errorClass(err))
			}
			return
		}
		if w.hooks.AfterClaim != nil {
			w.hooks.AfterClaim(len(res.Claimed))
		}
		if res.Exhausted > 0 {
			w.m.Outcomes.WithLabelValues(metrics.OutcomeFailed).Add(float64(res.Exhausted))
		}
		if len(res.Claimed) > 0 {
			w.m.ClaimBatchSize.Observe(float64(len(res.Claimed)))
			w.m.Outcomes.WithLabelValues(metrics.OutcomeClaimed).Add(float64(len(res.Claimed)))
			for i := range res.Claimed {
				w.launch(res.Claimed[i], sent)
			}
		}
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
		w.mu.Lock()
		idle := min(w.cfg.Concurrency-w.running, w.cfg.maxLive()-len(w.live))
		w.mu.Unlock()
		if idle*2 < w.cfg.Concurrency {
			return
		}
	}
}

func (w *Worker) launch(c lease.Claim, sent time.Time) {
	// The exemplar is the submit's trace: a slow pickup leads to the job.
	var submit trace.SpanContext
	if c.SubmitTraceparent != "" {
		submit, _ = tracing.ParseTraceparent(c.SubmitTraceparent)
	}
	tracing.Observe(w.m.PickupLatency, c.PickupDelay.Seconds(), submit)
	ctx, cancel := context.WithCancelCause(w.lifeCtx)
	r := &running{claim: c, localDeadline: sent.Add(w.cfg.LeaseDuration), cancel: cancel, started: time.Now()}
	r.timer = time.AfterFunc(w.cfg.MaxJobDuration, func() { w.timeOut(r) })
	w.mu.Lock()
	// The database let this worker claim a job it still runs under an
	// older claim: that claim's lease expired, so its handler is stale.
	old := w.byJob[c.JobID]
	w.live[c.ClaimID] = r
	w.byJob[c.JobID] = r
	r.slotHeld = true
	w.running++
	w.m.RunningJobs.Set(float64(w.running))
	w.mu.Unlock()
	if old != nil {
		w.markLost(old, metrics.LostSuperseded, ErrLeaseLost)
	}
	r.ctx = ctx
	w.execWG.Add(1)
	w.runQ <- r
}

// executor runs launched claims one at a time until Stop closes runQ. A
// fixed pool of maxLive() executors replaces a goroutine per job: the
// stacks stay grown, so a job costs no goroutine creation or stack growth
// (measured in the burndown profile as a tenth of the worker's CPU).
func (w *Worker) executor() {
	defer w.poolWG.Done()
	for r := range w.runQ {
		w.execute(r.ctx, r)
	}
}

// freeSlot gives r's execution slot back (once) and wakes the producer: the
// handler returned, so another job may start while r's outcome commits.
func (w *Worker) freeSlot(r *running) {
	w.mu.Lock()
	held := r.slotHeld
	if held {
		r.slotHeld = false
		w.running--
		w.m.RunningJobs.Set(float64(w.running))
	}
	w.mu.Unlock()
	if held {
		select {
		case w.slotFree <- struct{}{}:
		default:
		}
	}
}

// done forgets a claim whose outcome is settled (and frees its slot if the
// handler's return did not already).
func (w *Worker) done(r *running) {
	r.timer.Stop()
	r.cancel(context.Canceled)
	w.freeSlot(r)
	w.mu.Lock()
	delete(w.recheck, r)
	removed := false
	if w.live[r.claim.ClaimID] == r {
		delete(w.live, r.claim.ClaimID)
		removed = true
	}
	if w.byJob[r.claim.JobID] == r {
		delete(w.byJob, r.claim.JobID)
	}
	w.mu.Unlock()
	if removed {
		// A settled claim may make room under the maxLive bound.
		select {
		case w.slotFree <- struct{}{}:
		default:
		}
	}
}

// markLost stops renewal for r, counts the loss once under reason and
// cancels its handler with cause (ErrLeaseLost, or ErrRevoked for a
// revocation).
func (w *Worker) markLost(r *running, reason string, cause error) {
	w.mu.Lock()
	first := !r.lost
	r.lost = true
	w.mu.Unlock()
	if first {
		w.m.ClaimsLost.WithLabelValues(reason).Inc()
	}
	r.cancel(cause)
}

// timeOut ends an attempt that ran past MaxJobDuration: renewal of its claim
// stops, and a handler still running is cancelled with ErrJobTimeout (the
// executor then fails the job with etl_job_timeout while the lease holds).
func (w *Worker) timeOut(r *running) {
	w.mu.Lock()
	running := r.slotHeld && w.live[r.claim.ClaimID] == r
	if running {
		r.timedOut = true
	}
	w.mu.Unlock()
	if running {
		w.m.JobTimeouts.Inc()
		r.cancel(ErrJobTimeout)
	}
}

// backoff is full-jitter exponential: uniform in [0, min(max, base·2^(attempt-1))].
func backoff(base, maxDelay time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// errorClass maps an error to a fixed, payload-free word for logs.
func errorClass(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case isTransientDB(err):
		return "database_unavailable"
	default:
		return "database_error"
	}
}
