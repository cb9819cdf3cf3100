package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
)

// finishReq asks a completer to commit one successful job.
type finishReq struct {
	r     *running
	out   Output
	rows  int        // len(out.Rows)
	bytes int        // the rows' text and JSON
	reply chan error // nil: won and committed; lease.ErrLost: lost; other: nothing committed
}

func newFinishReq(r *running, out Output) *finishReq {
	req := &finishReq{r: r, out: out, rows: len(out.Rows), reply: make(chan error, 1)}
	for _, row := range out.Rows {
		req.bytes += len(row.Data) + len(row.Normalized)
	}
	return req
}

// group is a finish group being formed: at most FinishBatch jobs,
// FinishMaxRows target rows and FinishMaxBytes of them, except that a first
// job over the row or byte bound forms a group alone.
type group struct {
	reqs        []*finishReq
	rows, bytes int
}

func (g *group) full(c *Config) bool {
	return len(g.reqs) >= c.FinishBatch || g.rows >= c.FinishMaxRows || g.bytes >= c.FinishMaxBytes
}

// add takes req if it fits (or the group is empty) and reports whether it did.
func (g *group) add(c *Config, req *finishReq) bool {
	if len(g.reqs) > 0 && (len(g.reqs) >= c.FinishBatch || g.rows+req.rows > c.FinishMaxRows || g.bytes+req.bytes > c.FinishMaxBytes) {
		return false
	}
	g.reqs = append(g.reqs, req)
	g.rows += req.rows
	g.bytes += req.bytes
	return true
}

// Completer is the worker role that commits successful results in finish
// groups, on Completers
// goroutines of its own: whatever is queued when a group starts forming,
// plus what arrives within FinishLinger of its first result, up to the group
// bounds, shares one transaction. A result that does not fit starts the next
// group.
//
// Groups form one at a time (formMu): while one completer goroutine gathers
// a group, the others commit theirs or wait their turn to gather. So idle
// completers never split the results of one linger window between them (at
// 8 slots four idle completers made groups of 2.8 jobs, each its own
// commit), and a busy database grows the groups instead of the number of
// commits, as in a pipelined group commit.
//
// Start it before the executor pool and Stop it after: every finish request
// is answered before Stop returns.
type Completer struct {
	base   startstop.Base
	cfg    *Config
	db     *pgxpool.Pool
	claims *claimSet
	m      *metrics.Worker
	sig    *testSignals
	// notify wakes the outbox relays after a finish commit: the lifecycle
	// group row does not NOTIFY in its transaction (migration 00013).
	notify *pg.OutboxNotifier

	// ctx is the completer's life: finish transactions run under it;
	// cancelled once the completer stopped.
	ctx context.Context
	// finishQ carries successful results: written by finish on the executor
	// goroutines, read by the completer goroutine gathering a group.
	finishQ chan *finishReq
	// stopping is closed by Stop: read by the completer goroutines, which
	// commit what they hold and return.
	stopping chan struct{}
	// formMu lets one completer goroutine at a time gather a group; carry
	// is the result that did not fit the last group formed (guarded by
	// formMu).
	formMu sync.Mutex
	carry  *finishReq
}

func newCompleter(cfg *Config, db *pgxpool.Pool, claims *claimSet, m *metrics.Worker, sig *testSignals) *Completer {
	return &Completer{cfg: cfg, db: db, claims: claims, m: m, sig: sig, notify: pg.NewOutboxNotifier(db),
		finishQ: make(chan *finishReq, cfg.slots()), stopping: make(chan struct{})}
}

// Start launches the Completers goroutines.
func (cp *Completer) Start(ctx context.Context) error {
	return cp.base.Start(ctx, func(ctx context.Context) (startstop.StopFunc, error) {
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		cp.ctx = ctx
		var wg sync.WaitGroup
		for range cp.cfg.Completers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cp.loop()
			}()
		}
		return func(context.Context) error {
			close(cp.stopping)
			wg.Wait()
			cancel()
			return nil
		}, nil
	})
}

// Stop stops the completer goroutines and waits for them (startstop
// semantics). Call it only once no finish is pending.
func (cp *Completer) Stop(ctx context.Context) error { return cp.base.Stop(ctx) }

// Done is closed once Stop finished (startstop.Base.Done).
func (cp *Completer) Done() <-chan struct{} { return cp.base.Done() }

// finish hands a successful result to the completers and waits for its
// group to commit (finisher).
func (cp *Completer) finish(r *running, out Output) error {
	req := newFinishReq(r, out)
	cp.finishQ <- req
	return <-req.reply
}

func (cp *Completer) loop() {
	g := &group{reqs: make([]*finishReq, 0, cp.cfg.FinishBatch)}
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		if !cp.formGroup(g, linger) {
			return
		}
		cp.commitGroup(g.reqs, g.rows)
	}
}

// formGroup gathers the next group into g under formMu and reports false
// when the completer stops with nothing gathered.
func (cp *Completer) formGroup(g *group, linger *time.Timer) bool {
	cp.formMu.Lock()
	defer cp.formMu.Unlock()
	first := cp.carry
	cp.carry = nil
	if first == nil {
		select {
		case first = <-cp.finishQ:
		case <-cp.stopping:
			return false
		}
	}
	g.reqs, g.rows, g.bytes = g.reqs[:0], 0, 0
	g.add(cp.cfg, first)
	// take adds more to the group, or keeps it for the next group.
	take := func(more *finishReq) bool {
		if g.add(cp.cfg, more) {
			return true
		}
		cp.carry = more
		return false
	}
drain:
	for !g.full(cp.cfg) {
		select {
		case more := <-cp.finishQ:
			if !take(more) {
				break drain
			}
		default:
			break drain
		}
	}
	if cp.carry == nil && !g.full(cp.cfg) && cp.cfg.FinishLinger > 0 {
		linger.Reset(cp.cfg.FinishLinger)
	wait:
		for !g.full(cp.cfg) {
			select {
			case more := <-cp.finishQ:
				if !take(more) {
					break wait
				}
			case <-linger.C:
				break wait
			case <-cp.stopping:
				break wait
			}
		}
		linger.Stop()
	}
	return true
}

// commitGroup commits a group; if the group fails for a reason other than an
// unavailable database, each job is tried alone so one bad job cannot block
// the others.
func (cp *Completer) commitGroup(batch []*finishReq, rows int) {
	cp.sig.finishGroup.signal([2]int{len(batch), rows})
	cp.setFinishing(batch, true)
	err := cp.commitFinish(batch)
	if err != nil && len(batch) > 1 && !isTransientDB(err) {
		for _, req := range batch {
			one := []*finishReq{req}
			if err := cp.commitFinish(one); err != nil {
				cp.setFinishing(one, false)
				req.reply <- err
			}
		}
		return
	}
	if err != nil {
		if !errors.Is(err, errCommitUnknown) {
			// Nothing committed. A COMMIT without an answer may have
			// committed: the claims stay finishing (running.finishing) and
			// the retry's fenced write decides.
			cp.setFinishing(batch, false)
		}
		for _, req := range batch {
			req.reply <- err
		}
	}
}

// setFinishing marks the claims of batch as held by a completer, or no
// longer (see claimSet.setFinishing).
func (cp *Completer) setFinishing(batch []*finishReq, on bool) {
	rs := make([]*running, len(batch))
	for i, req := range batch {
		rs[i] = req.r
	}
	cp.claims.setFinishing(rs, on)
}

// commitFinish is the finish transaction: fenced success for every job of
// the group first (locking the won rows and telling which are still ours),
// then target rows only for the winners, then commit. A job whose lease did
// not match writes nothing. On error nothing is committed and the caller
// replies; on success each request is answered here.
//
// A durable job writes no response-ledger row: its idempotency is the job
// row's own (principal, submission key) uniqueness, its evidence is the
// SUCCEEDED row and its processed_data rows (keyed by job id), and no
// endpoint ever read the ledger text of a durable job. The ledger remains the
// synchronous path's idempotency store (docs/architecture.md).
func (cp *Completer) commitFinish(batch []*finishReq) error {
	refs := make([]lease.Ref, len(batch))
	for i, req := range batch {
		refs[i] = req.r.claim.Ref
	}
	ctx, cancel := context.WithTimeout(cp.ctx, cp.cfg.StatementTimeout)
	defer cancel()
	ctx, span := tracing.Start(ctx, "worker.finish", attribute.Int("group.size", len(batch)))
	var won map[uuid.UUID]bool // by claim id: two claims of one job may share a group
	err := finishTx(ctx, cp.db, answerGrace(cp.cfg.StatementTimeout), func(tx pgx.Tx) error {
		winners, err := lease.Succeed(ctx, tx, cp.cfg.OwnerID, refs)
		if err != nil {
			return err
		}
		won = make(map[uuid.UUID]bool, len(winners))
		for _, wn := range winners {
			won[wn.ClaimID] = true
		}
		if cp.sig.inFinishTx != nil {
			cp.sig.inFinishTx()
		}
		var rows []etl.TargetRow
		for _, req := range batch {
			if won[req.r.claim.ClaimID] {
				rows = append(rows, req.out.Rows...)
			}
		}
		if len(rows) > 0 {
			if err := etl.LoadRows(ctx, tx, rows); err != nil {
				return err
			}
		}
		if cp.sig.beforeFinishCommit != nil {
			cp.sig.beforeFinishCommit()
		}
		return nil
	})
	tracing.EndBatch(span, len(won), err)
	if err != nil {
		return err
	}
	if cp.sig.afterFinishCommit != nil {
		cp.sig.afterFinishCommit()
	}
	if len(won) > 0 {
		cp.notify.Kick()
	}
	cp.m.FinishBatchSize.Observe(float64(len(won)))
	for _, req := range batch {
		if won[req.r.claim.ClaimID] {
			req.reply <- nil
		} else {
			req.reply <- lease.ErrLost
		}
	}
	return nil
}

// finishTx is pg.WithTx for the finish transaction, whose COMMIT gets a
// deadline of its own, commitWait, instead of what the statements left of
// ctx's: a COMMIT sent just before that deadline could commit on the server
// after the worker gave up on it. A COMMIT that was sent and got no answer
// (a broken connection, commitWait passed) returns an error wrapping
// errCommitUnknown: the retry's fenced write matches nothing if it
// committed, and the executor then finds the job ended at this attempt
// (ExecutorPool.ownWrite).
func finishTx(ctx context.Context, db *pgxpool.Pool, commitWait time.Duration, fn func(tx pgx.Tx) error) (err error) {
	tx, err := pg.Begin(ctx, db)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitWait)
	defer cancel()
	if err := tx.Commit(cctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return fmt.Errorf("commit transaction: %w", err)
		}
		// Sent, not answered: it may have committed.
		return fmt.Errorf("commit transaction: %w: %w", errCommitUnknown, err)
	}
	return nil
}
