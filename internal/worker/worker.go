package worker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/chunked"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/startstop"
)

// Defaults New applies (Config.WithDefaults) to zero fields. The settings
// internal/config exposes take the same defaults there.
const (
	DefaultConcurrency    = 8
	DefaultPollInterval   = time.Second
	DefaultLeaseDuration  = 30 * time.Second
	DefaultRenewInterval  = 10 * time.Second
	DefaultSafetyMargin   = 5 * time.Second
	DefaultRetryBaseDelay = time.Second
	DefaultRetryMaxDelay  = 5 * time.Minute
	DefaultShutdownGrace  = 30 * time.Second
	DefaultMaxJobDuration = 6 * time.Hour
	// DefaultChunkedSlots is Config.ChunkedSlots's default (the chunk
	// bounds' are chunked.DefaultChunkRecords and chunked.DefaultChunkBytes).
	DefaultChunkedSlots = 2
	// DefaultSchemaCheckInterval is Config.SchemaCheckInterval's default.
	DefaultSchemaCheckInterval = 10 * time.Second
	// MinStatementTimeout is the floor of the default StatementTimeout,
	// max(RenewInterval, MinStatementTimeout).
	MinStatementTimeout = 5 * time.Second

	// Internal tuning, not exposed by internal/config: measured with the
	// burndown benchmark (docs/performance.md) and fixed for every
	// deployment; library users may still set them.
	DefaultFinishBatch   = 1024
	DefaultCompleters    = 2
	DefaultClaimCooldown = 500 * time.Microsecond
	// DefaultClaimOwners is how many owners one claim serves fairly
	// (MIGHTYETL_CLAIM_OWNERS; issue 33).
	DefaultClaimOwners    = 32
	DefaultFinishLinger   = 2 * time.Millisecond
	DefaultFinishMaxRows  = 20000
	DefaultFinishMaxBytes = 16 << 20
)

// Config tunes a Worker. Validate it with internal/config before use; New
// fills zero values with the defaults noted (WithDefaults). The fields
// internal/config exposes are named with their variable; the others are
// internal tuning.
type Config struct {
	// OwnerID identifies this worker in lease_owner_id ([A-Za-z0-9._:-]{8,128});
	// empty means a fresh DefaultOwnerID() (MIGHTYETL_WORKER_ID).
	OwnerID string
	// Concurrency is the number of execution slots (DefaultConcurrency;
	// MIGHTYETL_WORKER_CONCURRENCY).
	Concurrency int
	// PollInterval is the fallback claim interval when no wake-up arrives
	// (DefaultPollInterval; MIGHTYETL_WORKER_POLL_INTERVAL).
	PollInterval time.Duration
	// SchemaCheckInterval is how often the producer re-reads the schema
	// compatibility (pg.CheckCompatibility) before a claim round
	// (DefaultSchemaCheckInterval). While the schema is incompatible the
	// worker claims nothing.
	SchemaCheckInterval time.Duration
	// LeaseDuration is each lease's length from the database clock
	// (DefaultLeaseDuration; MIGHTYETL_LEASE_DURATION).
	LeaseDuration time.Duration
	// RenewInterval is the renewal period for all live claims
	// (DefaultRenewInterval; MIGHTYETL_LEASE_RENEW_INTERVAL).
	RenewInterval time.Duration
	// SafetyMargin is the minimum lease time the worker keeps in hand
	// (DefaultSafetyMargin; MIGHTYETL_LEASE_SAFETY_MARGIN); a quarter of it,
	// at most a second, is the renewer's guard.
	SafetyMargin time.Duration
	// RetryBaseDelay and RetryMaxDelay bound the full-jitter exponential
	// backoff of transient failures (DefaultRetryBaseDelay and
	// DefaultRetryMaxDelay; MIGHTYETL_RETRY_BASE_DELAY, MIGHTYETL_RETRY_MAX_DELAY).
	RetryBaseDelay, RetryMaxDelay time.Duration
	// ShutdownGrace is how long Stop waits for running handlers before
	// cancelling and releasing them (DefaultShutdownGrace;
	// MIGHTYETL_SHUTDOWN_GRACE_PERIOD).
	ShutdownGrace time.Duration
	// FinishBatch is the most jobs one finish transaction commits
	// (DefaultFinishBatch; internal).
	FinishBatch int
	// Completers is the number of concurrent finish transactions
	// (DefaultCompleters; internal).
	Completers int
	// ClaimCooldown is how long the producer lets freed slots accumulate
	// before claiming for them (DefaultClaimCooldown; negative: claim at
	// once; internal). A wake-up for new jobs never waits for it.
	ClaimCooldown time.Duration
	// ClaimOwners is how many owners one claim serves, each with its
	// weighted share of the free slots and by priority within it
	// (lease.ClaimParams.Owners; DefaultClaimOwners; negative: first-come
	// first-served; MIGHTYETL_CLAIM_OWNERS, where 0 means that).
	ClaimOwners int
	// WakeupSlots is how many execution slots, besides Concurrency, are
	// kept for the jobs a wake-up announces (DefaultWakeupSlots(Concurrency);
	// negative: none; MIGHTYETL_WORKER_WAKEUP_SLOTS, where 0 means none).
	// The regular claims never use them. When a wake-up arrives while the
	// producer is claiming or has no free slot (and at each poll with no
	// free slot), an arrivals claim (lease.ClaimArrivals) of at most the
	// free wake-up slots runs at once beside the regular claim: it takes a
	// light owner's new job, never a backlog's, so that job waits neither
	// for a claim of a heavy owner's backlog nor for a slot to free. An idle
	// worker takes a wake-up's jobs with its regular claim alone. None with
	// the first-come first-served claim (ClaimOwners negative).
	WakeupSlots int
	// FinishLinger is how long a completer that has fewer than FinishBatch
	// results waits for more before committing (DefaultFinishLinger;
	// negative: no wait; internal). A result's slot is already free while it
	// waits, so the linger trades a little completion latency for fewer,
	// larger commits, as River's batch completer does on its 50 ms tick.
	FinishLinger time.Duration
	// FinishMaxRows and FinishMaxBytes bound one finish group by the target
	// rows it writes and their size, besides FinishBatch jobs
	// (DefaultFinishMaxRows and DefaultFinishMaxBytes; internal): one large
	// job commits alone instead of making a group of small ones time out. A
	// job over the bounds commits alone.
	FinishMaxRows, FinishMaxBytes int
	// StatementTimeout bounds every claim, finish and fenced write (default
	// max(RenewInterval, MinStatementTimeout); derived, not configured); a
	// slower statement is cancelled and counts as a transient database
	// error. A claim is bounded by the database (its transaction's
	// statement_timeout) and committed only once its rows are read; the
	// worker waits for its answer up to StatementTimeout longer (at least a
	// second). Renewal is bounded by its own schedule.
	StatementTimeout time.Duration
	// MaxJobDuration bounds one attempt of a job (DefaultMaxJobDuration;
	// MIGHTYETL_MAX_JOB_DURATION): past it the handler is cancelled with
	// ErrJobTimeout, renewal of the claim stops, and the job ends FAILED
	// etl_job_timeout.
	MaxJobDuration time.Duration
	// ChunkedSlots is the number of execution slots for chunked jobs (kind
	// etl_chunked), which have their own producer, claim statement
	// (lease.ClaimChunkedJobs) and renewal, so a large load never takes a
	// small job's slot (DefaultChunkedSlots; MIGHTYETL_WORKER_CHUNKED_SLOTS).
	// Negative: this worker claims no chunked job.
	ChunkedSlots int
	// ChunkRecords and ChunkBytes bound one chunk transaction of a chunked
	// job by records and by payload bytes, whichever comes first;
	// ChunkBytes also bounds one record (chunked.DefaultChunkRecords,
	// chunked.DefaultChunkBytes; MIGHTYETL_CHUNK_RECORDS, MIGHTYETL_CHUNK_BYTES).
	ChunkRecords, ChunkBytes int
	// ChunkConns is the most chunk transactions of one chunked job open at
	// once, each on a connection of the execution pool; they commit in
	// order (chunked.Config.Connections, chunked.DefaultConnections;
	// MIGHTYETL_CHUNK_CONNECTIONS).
	ChunkConns int
}

// maxLive bounds the claims a worker holds at once: slots() running
// handlers plus the claims whose handler returned and whose outcome is
// settling (waiting in a finish group or writing a retry or failure), at
// most max(slots(), FinishBatch × Completers) of them, so a full round of
// finish groups never holds back the claims of free slots.
func (c *Config) maxLive() int {
	return c.slots() + max(c.slots(), c.FinishBatch*c.Completers)
}

// StatementTimeout is the default Config.StatementTimeout for a renewal
// interval: max(interval, MinStatementTimeout).
func StatementTimeout(renewInterval time.Duration) time.Duration {
	return max(renewInterval, MinStatementTimeout)
}

// DefaultWakeupSlots is Config.WakeupSlots's default: none. Wake-up slots
// run jobs besides Concurrency, so a worker configured for one job at a
// time would run two; an operator opts in (SuggestedWakeupSlots is the
// figure the many-owners benchmark ran with).
func DefaultWakeupSlots(concurrency int) int { return 0 }

// SuggestedWakeupSlots is the wake-up slots for a worker of concurrency
// slots that serves many owners: max(1, concurrency/64), a slot per 64 and
// at least one.
func SuggestedWakeupSlots(concurrency int) int { return max(1, concurrency/64) }

// slots is how many handlers the worker may run at once: Concurrency plus
// the wake-up slots.
func (c *Config) slots() int { return c.Concurrency + max(c.WakeupSlots, 0) }

// WithDefaults returns c with every zero field set to its default. It is the
// one place worker defaults are applied.
func (c Config) WithDefaults() Config {
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.SchemaCheckInterval = cmp.Or(c.SchemaCheckInterval, DefaultSchemaCheckInterval)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, DefaultLeaseDuration)
	c.RenewInterval = cmp.Or(c.RenewInterval, DefaultRenewInterval)
	c.SafetyMargin = cmp.Or(c.SafetyMargin, DefaultSafetyMargin)
	c.RetryBaseDelay = cmp.Or(c.RetryBaseDelay, DefaultRetryBaseDelay)
	c.RetryMaxDelay = cmp.Or(c.RetryMaxDelay, DefaultRetryMaxDelay)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, DefaultShutdownGrace)
	c.FinishBatch = cmp.Or(c.FinishBatch, DefaultFinishBatch)
	c.Completers = cmp.Or(c.Completers, DefaultCompleters)
	c.ClaimCooldown = cmp.Or(c.ClaimCooldown, DefaultClaimCooldown)
	c.ClaimOwners = cmp.Or(c.ClaimOwners, DefaultClaimOwners)
	c.WakeupSlots = cmp.Or(c.WakeupSlots, DefaultWakeupSlots(c.Concurrency))
	if c.ClaimOwners < 0 {
		// First-come first-served takes the oldest jobs first, a light
		// owner's too: no wake-up slot may take one ahead of them.
		c.WakeupSlots = -1
	}
	c.FinishLinger = cmp.Or(c.FinishLinger, DefaultFinishLinger)
	c.FinishMaxRows = cmp.Or(c.FinishMaxRows, DefaultFinishMaxRows)
	c.FinishMaxBytes = cmp.Or(c.FinishMaxBytes, DefaultFinishMaxBytes)
	c.StatementTimeout = cmp.Or(c.StatementTimeout, StatementTimeout(c.RenewInterval))
	c.MaxJobDuration = cmp.Or(c.MaxJobDuration, DefaultMaxJobDuration)
	c.ChunkedSlots = cmp.Or(c.ChunkedSlots, DefaultChunkedSlots)
	c.ChunkRecords = cmp.Or(c.ChunkRecords, chunked.DefaultChunkRecords)
	c.ChunkBytes = cmp.Or(c.ChunkBytes, chunked.DefaultChunkBytes)
	c.ChunkConns = cmp.Or(c.ChunkConns, chunked.DefaultConnections)
	if c.OwnerID == "" {
		c.OwnerID = DefaultOwnerID()
	}
	return c
}

// notOwnerIDHost matches the bytes of a host name DefaultOwnerID drops.
var notOwnerIDHost = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// DefaultOwnerID returns a new owner id for a worker given none
// (Config.OwnerID, MIGHTYETL_WORKER_ID): host-pid-random, where host is the
// host name cut to [A-Za-z0-9._-] and at most 64 bytes ("worker" when
// nothing is left) and random is eight hex digits of a random UUID, so it
// always matches [A-Za-z0-9._:-]{8,128}. Every call returns a different id.
// It is the one default of the worker id.
func DefaultOwnerID() string {
	host, _ := os.Hostname()
	host = notOwnerIDHost.ReplaceAllString(host, "")
	if host == "" {
		host = "worker"
	}
	return fmt.Sprintf("%s-%d-%s", host[:min(len(host), 64)], os.Getpid(), uuid.NewString()[:8])
}

// Worker claims and runs durable jobs. It composes four roles, each with its
// own Start and Stop, around one record of the claims it holds:
//
//	producer      claims when slots free, a wake-up arrives or the poll passes; hands claims to the pool
//	executorPool  runs each claim's handler, then settles it: success to the completer, fenced writes otherwise
//	completer     commits successful results in finish groups
//	renewer       extends every held lease on its own pool; marks claims lost
//
// Create it with New, then Start and Stop it once (startstop semantics).
// Wake and Revoke may be called from any goroutine at any time.
type Worker struct {
	base startstop.Base
	cfg  Config
	m    *metrics.Worker
	log  *slog.Logger

	claims    *claimSet
	producer  *Producer
	executors *ExecutorPool
	completer *Completer
	renewer   *Renewer
	// chunked runs chunked jobs on roles of its own; nil when
	// Config.ChunkedSlots is negative.
	chunked *chunkedRoles

	// signals are the test seams (unset in production; export_test.go).
	signals testSignals
}

// New creates a worker. exec runs claims and finishes; renew is a separate
// small pool used only by the renewer, so handlers that hold every exec
// connection cannot starve renewal.
func New(cfg Config, exec, renew *pgxpool.Pool, handlers map[string]Handler, m *metrics.Worker, log *slog.Logger) *Worker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Worker{cfg: cfg.WithDefaults(), m: m, log: log}
	c, sig := &w.cfg, &w.signals
	w.claims = newClaimSet(c, m, sig)
	w.completer = newCompleter(c, exec, w.claims, m, sig)
	w.renewer = newRenewer(c, renew, w.claims, m, log, sig)
	w.executors = newExecutorPool(c, exec, w.claims, w.completer, handlers, m, log, sig)
	w.producer = newProducer(c, exec, w.claims, w.executors, m, log, sig)
	if c.ChunkedSlots > 0 {
		w.chunked = newChunkedRoles(c, exec, renew, m, log)
	}
	return w
}

// role is what the Worker needs of each role: startstop plus Done.
type role interface {
	startstop.Service
	Done() <-chan struct{}
}

// roles in start order; Stop runs them in reverse: the producer stops
// claiming first, the executor pool drains (renewal still running), and
// only then the renewer and the completer stop.
func (w *Worker) roles() []role {
	if w.chunked == nil {
		return []role{w.completer, w.renewer, w.executors, w.producer}
	}
	// The two executor pools drain together (one grace period for both).
	ch := w.chunked
	return []role{w.completer, w.renewer, ch.renewer, ch.purger,
		newRolePair(w.executors, ch.executors), w.producer, ch.producer}
}

// Start starts the roles and returns at once. A second Start returns
// startstop.ErrAlreadyStarted, a Start after Stop startstop.ErrStopped: a
// worker runs once.
func (w *Worker) Start(ctx context.Context) error {
	return w.base.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		for _, r := range w.roles() {
			// The roles are new and started once here: Start cannot fail.
			if err := r.Start(ctx); err != nil {
				return nil, err
			}
		}
		w.log.Info("worker started", "concurrency", w.cfg.Concurrency, "chunked_slots", max(w.cfg.ChunkedSlots, 0),
			"lease_duration", w.cfg.LeaseDuration.String(), "renew_interval", w.cfg.RenewInterval.String())
		return w.stop, nil
	})
}

// Wake asks the producer to claim now (an advisory wake-up). Never blocks.
func (w *Worker) Wake() {
	w.m.WakeupsReceived.Inc()
	w.producer.wakeUp()
	if w.chunked != nil {
		w.chunked.producer.wakeUp()
	}
}

// Revoke asks the renewer to renew jobID's claim at once, if this worker
// holds one; otherwise it does nothing. A revocation is only a hint (design
// invariant 10): the handler is cancelled with ErrRevoked only when that
// renewal finds the lease gone in the database (the job was cancelled,
// finished or reclaimed). A lease still held is simply renewed. Never blocks.
func (w *Worker) Revoke(jobID uuid.UUID) {
	w.m.RevocationsHeard.Inc()
	if w.claims.askRecheck(jobID) {
		w.renewer.recheckSoon()
	} else if w.chunked != nil && w.chunked.claims.askRecheck(jobID) {
		w.chunked.renewer.recheckSoon()
	}
}

// Running returns how many handlers run now: the claims holding an execution
// slot (a claim whose handler returned holds none while its outcome commits).
func (w *Worker) Running() int {
	n := w.claims.runningCount()
	if w.chunked != nil {
		n += w.chunked.claims.runningCount()
	}
	return n
}

// Stop stops claiming, waits up to ShutdownGrace (or until ctx ends) for
// running jobs, cancels the rest with ErrShutdown and releases their claims,
// then stops renewal and the completers. When ctx ends first, Stop returns
// ctx.Err() at once and the shutdown goes on in the background (a handler
// that ignores cancellation keeps its claim, renewed, until it returns); a
// later Stop waits for it. Stop before Start returns nil; safe to call more
// than once and concurrently.
func (w *Worker) Stop(ctx context.Context) error { return w.base.Stop(ctx) }

// stop is the worker's shutdown, run once by the first Stop: the roles in
// reverse start order, each waited for to the end even when ctx ended (the
// roles get ctx, so they hurry).
func (w *Worker) stop(ctx context.Context) error {
	roles := w.roles()
	for i := len(roles) - 1; i >= 0; i-- {
		_ = roles[i].Stop(ctx)
		if done := roles[i].Done(); done != nil {
			<-done
		}
	}
	w.log.Info("worker stopped")
	return nil
}
