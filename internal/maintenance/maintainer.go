// Package maintenance runs retention (what `etlctl prune` does) inside the
// worker fleet: every worker process runs a Maintainer, and one of them at
// a time, elected through a leader row of etl_maintenance_leader (migration
// 00022, pg.TakeLeadership), prunes terminal jobs, response-ledger rows,
// claim-queue orphans, unpublished outbox rows and operator audit rows past
// their windows, and what large (chunked) jobs leave behind (the target
// rows of failed and cancelled loads, expired and finished uploads, queue,
// load and bad-record rows of finished or pruned jobs), in bounded batches
// (docs/operations/maintenance.md).
//
// Invariants:
//   - Never two pruning at once. Each batch runs in a transaction whose
//     first statement re-checks, on the database clock, that this process's
//     term is unexpired and still carries its token, extends it and holds
//     the leadership row's lock until the batch commits
//     (pg.FencedPrune). A holder that paused past its expiry and lost the
//     row deletes nothing; a process taking the row waits for a running
//     batch to commit.
//   - Handover within one Interval. A term lasts Interval/2 of the database
//     clock and every Maintainer attempts (renews or takes) every
//     Interval/4, so the row of a holder that died without resigning
//     expires within Interval/2 and is taken within Interval/4 after.
//   - Pooler-safe. No advisory lock and no session state: each attempt is
//     one statement and each batch one short transaction.
//
// Overlapping `etlctl prune` runs are safe: both run the same idempotent
// deletes, each row locked FOR UPDATE SKIP LOCKED, so a row is deleted by
// exactly one of them and together they delete what either would alone.
package maintenance

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
)

// Defaults of Config, and of the worker's MIGHTYETL_MAINTENANCE_* and
// MIGHTYETL_PRUNE_* settings (internal/config).
const (
	// DefaultInterval is how often the elected maintainer prunes. The
	// terminal-jobs statement reads etl_job_records without an index on
	// its window, so a run costs a scan of the jobs table.
	DefaultInterval = 10 * time.Minute
	// DefaultWindow is the retention of terminal jobs, ledger rows and
	// unpublished outbox rows (`etlctl prune`'s default).
	DefaultWindow = 720 * time.Hour
	// DefaultAuditWindow keeps the operator audit three times longer than
	// the jobs it names (`etlctl prune`'s default).
	DefaultAuditWindow = 2160 * time.Hour
	// DefaultStatementTimeout bounds each statement of a batch.
	DefaultStatementTimeout = time.Minute
	// attemptTimeout bounds one election attempt.
	attemptTimeout = 10 * time.Second
	// LeaderName is the etl_maintenance_leader row retention elects.
	LeaderName = "retention"
)

// Windows are the retention windows by the database clock; zero skips that
// part. The claim-queue orphans and the chunked-job kinds have no window
// and are always pruned.
type Windows struct {
	TerminalJobs time.Duration
	Ledger       time.Duration
	Outbox       time.Duration
	Audit        time.Duration
}

// DefaultWindows are the windows of `etlctl prune` without flags.
func DefaultWindows() Windows {
	return Windows{TerminalJobs: DefaultWindow, Ledger: DefaultWindow, Outbox: DefaultWindow, Audit: DefaultAuditWindow}
}

// window is the window of kind; PruneKindOrphanQueue and the chunked-job
// kinds have none and run always (a positive placeholder).
func (w Windows) window(kind pg.PruneKind) time.Duration {
	switch kind {
	case pg.PruneKindTerminalJobs:
		return w.TerminalJobs
	case pg.PruneKindLedger:
		return w.Ledger
	case pg.PruneKindOutbox:
		return w.Outbox
	case pg.PruneKindAudit:
		return w.Audit
	}
	return time.Hour
}

// Config configures a Maintainer. Zero durations and sizes take the
// defaults above; Windows has no defaults here (zero skips), the caller
// passes DefaultWindows() or the settings.
type Config struct {
	// Holder identifies this process in the leader row (the worker's
	// owner id). Required.
	Holder string
	// Interval is how often the elected maintainer prunes; the term lasts
	// Interval/2 and every Maintainer attempts election every Interval/4.
	Interval time.Duration
	// Windows are the retention windows.
	Windows Windows
	// Batch is the most rows per DELETE; zero means pg.DefaultPruneBatch.
	Batch int
	// StatementTimeout bounds each statement of a batch's transaction.
	StatementTimeout time.Duration
	// Logger receives one line per leadership change and per failed part
	// of a run (error class only); nil discards.
	Logger *slog.Logger
	// Metrics receives the counters; nil registers a private set.
	Metrics *metrics.Maintenance
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.Batch = cmp.Or(c.Batch, pg.DefaultPruneBatch)
	c.StatementTimeout = cmp.Or(c.StatementTimeout, DefaultStatementTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewMaintenance(nil)
	}
	return c
}

// Term is how long a leadership term lasts without renewal for interval:
// half of it.
func Term(interval time.Duration) time.Duration { return interval / 2 }

// AttemptEvery is how often a Maintainer renews or takes the leadership
// for interval: a quarter of it, so a holder renews twice within its term
// and a follower takes an expired row within a quarter interval.
func AttemptEvery(interval time.Duration) time.Duration { return interval / 4 }

// Maintainer elects itself (or not) and, while elected, prunes every
// Interval. Start and Stop follow internal/startstop; RunOnce is the loop
// body. Safe for concurrent use, though RunOnce calls are serialised.
type Maintainer struct {
	cfg Config
	db  *pgxpool.Pool
	ss  startstop.Base

	runMu   sync.Mutex // serialises RunOnce
	mu      sync.Mutex // guards term and lastRun for Leader
	term    pg.LeaderTerm
	lastRun time.Time // monotonic; zero: not pruned in this term yet

	// beforePrune, when set, runs after a successful election and before
	// the run's first batch (a test hook: pause the holder there).
	beforePrune func()
}

// New returns a Maintainer on db (the worker's execution pool: it uses one
// connection at a time); nothing runs until Start.
func New(db *pgxpool.Pool, cfg Config) *Maintainer {
	return &Maintainer{cfg: cfg.withDefaults(), db: db}
}

// Leader reports whether this Maintainer held the leadership at its last
// attempt.
func (m *Maintainer) Leader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.term != pg.LeaderTerm{}
}

// Start runs RunOnce at once and then every AttemptEvery(Interval) in the
// background until Stop. It returns at once.
func (m *Maintainer) Start(ctx context.Context) error {
	return m.ss.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(AttemptEvery(m.cfg.Interval))
			defer t.Stop()
			for {
				m.RunOnce(runCtx)
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
				}
			}
		}()
		return func(ctx context.Context) error {
			cancel()
			<-done
			m.resign(ctx)
			return nil
		}, nil
	})
}

// Stop ends the loop (a running batch is cancelled and rolls back), waits
// for it, and resigns a held leadership so another process takes it at its
// next attempt. Safe to call twice and before Start.
func (m *Maintainer) Stop(ctx context.Context) error { return m.ss.Stop(ctx) }

// resign deletes this process's leader row, if it still holds one.
func (m *Maintainer) resign(ctx context.Context) {
	m.runMu.Lock()
	defer m.runMu.Unlock()
	term := m.currentTerm()
	if term == (pg.LeaderTerm{}) {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := pg.ResignLeadership(rctx, m.db, term); err != nil {
		m.cfg.Logger.Warn("maintenance leadership resign failed; it expires on its own", "error_class", pg.ErrorClass(err))
	}
	m.setTerm(pg.LeaderTerm{})
}

func (m *Maintainer) currentTerm() pg.LeaderTerm {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.term
}

// setTerm records term (zero: not leader), updates the leader gauge and
// logs a change of leadership, once per change, without ids.
func (m *Maintainer) setTerm(term pg.LeaderTerm) {
	m.mu.Lock()
	was := m.term != pg.LeaderTerm{}
	m.term = term
	is := term != pg.LeaderTerm{}
	if is != was {
		m.lastRun = time.Time{}
	}
	m.mu.Unlock()
	switch {
	case is && !was:
		m.cfg.Metrics.Leader.Set(1)
		m.cfg.Logger.Info("maintenance leadership gained; this worker runs retention", "interval", m.cfg.Interval.String())
	case was && !is:
		m.cfg.Metrics.Leader.Set(0)
		m.cfg.Logger.Info("maintenance leadership ended; another worker may run retention")
	}
}

// RunOnce makes one election attempt (renew a held term, else try to take
// the row) and, when elected and no run of this term ended within about an
// Interval, runs retention once.
func (m *Maintainer) RunOnce(ctx context.Context) {
	m.runMu.Lock()
	defer m.runMu.Unlock()
	if !m.elect(ctx) {
		return
	}
	m.mu.Lock()
	// Attempts come every quarter interval: a run is due at the first one
	// within an eighth of an interval of the previous run's end, so runs
	// come about one Interval apart, not up to a quarter later.
	due := m.lastRun.IsZero() || time.Since(m.lastRun) >= m.cfg.Interval-AttemptEvery(m.cfg.Interval)/2
	m.mu.Unlock()
	if !due {
		return
	}
	if m.beforePrune != nil {
		m.beforePrune()
	}
	m.prune(ctx)
}

// elect renews or takes the leadership and reports whether this process
// holds it.
func (m *Maintainer) elect(ctx context.Context) bool {
	ttl := Term(m.cfg.Interval)
	// An attempt waits at most for a running batch of the holder (a take
	// against an expired-looking row) within the attempt bound.
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	if term := m.currentTerm(); term != (pg.LeaderTerm{}) {
		held, err := pg.RenewLeadership(actx, m.db, term, ttl)
		switch {
		case err != nil:
			// Unknown whether the renewal landed: act as a follower; the
			// next attempt takes the row again (the holder's own) if it can.
			m.electionFailed(ctx, err)
			m.setTerm(pg.LeaderTerm{})
			return false
		case !held:
			m.cfg.Metrics.Elections.WithLabelValues(metrics.ElectionLost).Inc()
			m.setTerm(pg.LeaderTerm{})
			return false
		}
		m.cfg.Metrics.Elections.WithLabelValues(metrics.ElectionRenewed).Inc()
		return true
	}
	term, held, err := pg.TakeLeadership(actx, m.db, LeaderName, m.cfg.Holder, ttl)
	if err != nil {
		m.electionFailed(ctx, err)
		return false
	}
	if !held {
		m.cfg.Metrics.Elections.WithLabelValues(metrics.ElectionDenied).Inc()
		return false
	}
	m.cfg.Metrics.Elections.WithLabelValues(metrics.ElectionGained).Inc()
	m.setTerm(term)
	return true
}

// electionFailed counts and logs a failed attempt by its class (SQLSTATE
// 42P01, a schema before 00022 after a rollback, is schema_mismatch).
func (m *Maintainer) electionFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	m.cfg.Metrics.Elections.WithLabelValues(metrics.ElectionError).Inc()
	m.cfg.Logger.Warn("maintenance election attempt failed; will retry", "error_class", pg.ErrorClass(err))
}

// prune runs every part of retention under the current term and records
// the run's outcome.
func (m *Maintainer) prune(ctx context.Context) {
	f := pg.FencedPrune{Term: m.currentTerm(), TTL: Term(m.cfg.Interval), StatementTimeout: m.cfg.StatementTimeout}
	outcome := metrics.RunOK
	for _, kind := range pg.PruneKinds {
		w := m.cfg.Windows.window(kind)
		if w <= 0 {
			continue
		}
		n, err := f.Prune(ctx, m.db, kind, w, m.cfg.Batch)
		m.cfg.Metrics.Pruned.WithLabelValues(string(kind)).Add(float64(n))
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return // stopping: the run neither succeeded nor failed
		}
		if errors.Is(err, pg.ErrNotLeader) {
			outcome = metrics.RunFenced
			m.cfg.Metrics.Elections.WithLabelValues(metrics.ElectionLost).Inc()
			m.setTerm(pg.LeaderTerm{})
			break
		}
		outcome = metrics.RunError
		m.cfg.Logger.Warn("retention part failed; the next run retries it", "kind", string(kind), "error_class", pg.ErrorClass(err))
	}
	m.cfg.Metrics.Runs.WithLabelValues(outcome).Inc()
	if outcome == metrics.RunFenced {
		return
	}
	m.mu.Lock()
	m.lastRun = time.Now()
	m.mu.Unlock()
	if outcome == metrics.RunOK {
		m.cfg.Metrics.LastSuccess.SetToCurrentTime()
	}
}
