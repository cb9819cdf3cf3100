package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/chunked"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
)

// chunkedRoles run chunked jobs (kind etl_chunked, design.md invariant 11)
// beside the small-job roles, on roles of their own so that the small-job
// path (its claim statement, slots and finish groups) is unchanged:
//
//	producer   claims with lease.ClaimChunkedJobs into ChunkedSlots slots, on the poll and on wake-ups
//	executors  run the chunked handler (chunked.Loader: one fenced chunk transaction per chunk) and
//	           settle: success by lease.SucceedChunked, failure by lease.FailChunked, retry and
//	           release as any job
//	renewer    renews the chunked claims (a chunk transaction holding a job row makes it busy, not lost)
//	purger     removes a failed or cancelled job's staged rows, and a terminal job's stored payload,
//	           in bounded batches after the claim settled
type chunkedRoles struct {
	cfg       Config // the worker's, with Concurrency = ChunkedSlots
	claims    *claimSet
	producer  *Producer
	executors *ExecutorPool
	renewer   *Renewer
	purger    *purger
	loader    *chunked.Loader
	sig       testSignals
}

func newChunkedRoles(c *Config, exec, renew *pgxpool.Pool, m *metrics.Worker, log *slog.Logger) *chunkedRoles {
	ch := &chunkedRoles{cfg: *c}
	cc := &ch.cfg
	// Slots of its own; a chunked claim settles alone (no finish groups),
	// so at most ChunkedSlots more claims settle while others run.
	cc.Concurrency = c.ChunkedSlots
	cc.FinishBatch, cc.Completers = 1, 1
	// No wake-up slots: a chunked job is never a light owner's quick one.
	cc.WakeupSlots = -1
	// Its running claims have a gauge of their own.
	cm := *m
	cm.RunningJobs = m.RunningChunkedJobs
	ch.loader = chunked.NewLoader(exec, chunked.Config{ChunkRecords: c.ChunkRecords, ChunkBytes: c.ChunkBytes,
		Connections: c.ChunkConns, StatementTimeout: c.StatementTimeout})
	ch.loader.OnChunk = func(outcome string, loaded int64) {
		m.ChunkCommits.WithLabelValues(outcome).Inc()
		if loaded > 0 {
			m.RecordsLoaded.Add(float64(loaded))
		}
	}
	ch.claims = newClaimSet(cc, &cm, &ch.sig)
	ch.renewer = newRenewer(cc, renew, ch.claims, &cm, log, &ch.sig)
	ch.purger = &purger{db: exec, log: log}
	handlers := map[string]Handler{pg.KindETLChunked: chunkedHandler(ch.loader)}
	fin := &chunkedFinisher{cfg: cc, db: exec, claims: ch.claims}
	ch.executors = newExecutorPool(cc, exec, ch.claims, fin, handlers, &cm, log, &ch.sig)
	ch.executors.failJob = func(ctx context.Context, r *running, code string, herr error) error {
		var re *chunked.RecordError
		var failed int64
		if errors.As(herr, &re) {
			failed = re.Number
		}
		return lease.FailChunked(ctx, exec, r.claim.Ref, code, failed)
	}
	ch.executors.settled = func(r *running, outcome string) {
		switch outcome {
		case metrics.OutcomeSucceeded, metrics.OutcomeFailed, metrics.OutcomeCancelled, metrics.OutcomeStale:
			// Terminal (or maybe: a stale claim's job may have ended
			// meanwhile); Purge touches only terminal jobs.
			ch.purger.purge(r.claim.JobID)
		}
	}
	ch.producer = newProducer(cc, exec, ch.claims, ch.executors, &cm, log, &ch.sig)
	ch.producer.claim = lease.ClaimChunkedJobs
	return ch
}

// chunkedHandler loads a chunked job from its committed checkpoint to its
// end (chunked.Loader.Load); the success itself is the finisher's. It stops
// at the next chunk boundary once ctx is done.
func chunkedHandler(l *chunked.Loader) Handler {
	return func(ctx context.Context, c *lease.Claim) (Output, error) {
		err := l.Load(ctx, c.Ref)
		var re *chunked.RecordError
		switch {
		case err == nil:
			return Output{}, nil
		case ctx.Err() != nil:
			// Lost, revoked, timed out or shutting down: the executor
			// decides by the cause.
			return Output{}, context.Cause(ctx)
		case errors.Is(err, lease.ErrLost):
			return Output{}, err
		case errors.As(err, &re):
			return Output{}, &Error{Code: re.Code, Err: err}
		case errors.Is(err, chunked.ErrIntegrity):
			return Output{}, Permanent(codes.JobIntegrityFailure, err)
		case errors.Is(err, chunked.ErrTarget):
			return Output{}, Permanent(codes.TargetFailure, err)
		case errors.Is(err, chunked.ErrTransient):
			return Output{}, Transient(err)
		}
		return Output{}, err
	}
}

// chunkedFinisher applies a loaded chunked job's fenced success
// (lease.SucceedChunked) in its own short transaction.
type chunkedFinisher struct {
	cfg    *Config
	db     *pgxpool.Pool
	claims *claimSet
}

// finish marks the claim finishing while the success transaction runs (a
// renewal that finds the lease ended by it is not a loss; see
// running.finishing).
func (f *chunkedFinisher) finish(r *running, _ Output) error {
	rs := []*running{r}
	f.claims.setFinishing(rs, true)
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.StatementTimeout)
	defer cancel()
	err := lease.SucceedChunked(ctx, f.db, r.claim.Ref)
	if err != nil && !errors.Is(err, lease.ErrLost) {
		f.claims.setFinishing(rs, false)
	}
	return err
}

// purger runs chunked.Purge for jobs whose claim settled, each on a
// goroutine of its own under the purger's life: Stop cancels what still
// runs (the maintainer removes the rest) and waits for it.
type purger struct {
	base   startstop.Base
	db     *pgxpool.Pool
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	active map[uuid.UUID]bool
	// done, when set (tests), receives each job id whose purge ended.
	done chan uuid.UUID
}

func (p *purger) Start(ctx context.Context) error {
	return p.base.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
		p.active = make(map[uuid.UUID]bool)
		return func(context.Context) error {
			p.cancel()
			p.wg.Wait()
			return nil
		}, nil
	})
}

func (p *purger) Stop(ctx context.Context) error { return p.base.Stop(ctx) }

func (p *purger) Done() <-chan struct{} { return p.base.Done() }

// purge starts the clean-up of jobID unless one runs for it already.
func (p *purger) purge(jobID uuid.UUID) {
	p.mu.Lock()
	if p.ctx == nil || p.ctx.Err() != nil || p.active[jobID] {
		p.mu.Unlock()
		return
	}
	p.active[jobID] = true
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		_, err := chunked.Purge(p.ctx, p.db, jobID, chunked.DefaultPurgeRows, chunked.DefaultPurgeChunks)
		if err != nil && p.ctx.Err() == nil {
			p.log.Warn("chunked job clean-up failed; the maintainer finishes it", "error_class", pg.ErrorClass(err))
		}
		p.mu.Lock()
		delete(p.active, jobID)
		p.mu.Unlock()
		if p.done != nil {
			p.done <- jobID
		}
	}()
}

// rolePair is two roles started one after the other and stopped together:
// Stop stops both at once and Done closes when both are done.
type rolePair struct {
	a, b role
}

func newRolePair(a, b role) *rolePair { return &rolePair{a: a, b: b} }

func (p *rolePair) Start(ctx context.Context) error {
	if err := p.a.Start(ctx); err != nil {
		return err
	}
	return p.b.Start(ctx)
}

func (p *rolePair) Stop(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = p.b.Stop(ctx)
	}()
	err := p.a.Stop(ctx)
	wg.Wait()
	return err
}

func (p *rolePair) Done() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		if d := p.a.Done(); d != nil {
			<-d
		}
		if d := p.b.Done(); d != nil {
			<-d
		}
		close(done)
	}()
	return done
}
