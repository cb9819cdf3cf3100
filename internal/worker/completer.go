package worker

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/etl"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
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

// finishSuccess hands a successful result to the completers and waits for
// its commit, through fencedWrite: a transient database error is retried
// while the lease is ours, a deterministic one fails the job with
// etl_target_failure, a lost lease is final. (The completer bounds the
// finish transaction with StatementTimeout.)
func (w *Worker) finishSuccess(r *running, out Output) string {
	return w.fencedWrite(r, metrics.OutcomeSucceeded, func(context.Context) error {
		req := newFinishReq(r, out)
		w.finishQ <- req
		return <-req.reply
	})
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

// completer commits finished jobs in groups: whatever is queued when a
// group starts forming, plus what arrives within FinishLinger of its first
// result, up to the group bounds, shares it. A result that does not fit
// starts the next group.
//
// Groups form one at a time (formMu): while one completer gathers a group,
// the others commit theirs or wait their turn to gather. So idle completers
// never split the results of one linger window between them (at 8 slots
// four idle completers made groups of 2.8 jobs, each its own commit), and a
// busy database grows the groups instead of the number of commits, as in a
// pipelined group commit.
func (w *Worker) completer() {
	defer w.finishWG.Done()
	g := &group{reqs: make([]*finishReq, 0, w.cfg.FinishBatch)}
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		if !w.formGroup(g, linger) {
			return
		}
		w.commitGroup(g.reqs, g.rows)
	}
}

// formGroup gathers the next group into g under formMu and reports false
// when the completers stop with nothing gathered.
func (w *Worker) formGroup(g *group, linger *time.Timer) bool {
	w.formMu.Lock()
	defer w.formMu.Unlock()
	first := w.carry
	w.carry = nil
	if first == nil {
		select {
		case first = <-w.finishQ:
		case <-w.finishStop:
			return false
		}
	}
	g.reqs, g.rows, g.bytes = g.reqs[:0], 0, 0
	g.add(&w.cfg, first)
	// take adds more to the group, or keeps it for the next group.
	take := func(more *finishReq) bool {
		if g.add(&w.cfg, more) {
			return true
		}
		w.carry = more
		return false
	}
drain:
	for !g.full(&w.cfg) {
		select {
		case more := <-w.finishQ:
			if !take(more) {
				break drain
			}
		default:
			break drain
		}
	}
	if w.carry == nil && !g.full(&w.cfg) && w.cfg.FinishLinger > 0 {
		linger.Reset(w.cfg.FinishLinger)
	wait:
		for !g.full(&w.cfg) {
			select {
			case more := <-w.finishQ:
				if !take(more) {
					break wait
				}
			case <-linger.C:
				break wait
			case <-w.finishStop:
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
func (w *Worker) commitGroup(batch []*finishReq, rows int) {
	if w.hooks.FinishGroup != nil {
		w.hooks.FinishGroup(len(batch), rows)
	}
	w.setFinishing(batch, true)
	err := w.commitFinish(batch)
	if err != nil && len(batch) > 1 && !isTransientDB(err) {
		for _, req := range batch {
			one := []*finishReq{req}
			if err := w.commitFinish(one); err != nil {
				w.setFinishing(one, false)
				req.reply <- err
			}
		}
		return
	}
	if err != nil {
		w.setFinishing(batch, false)
		for _, req := range batch {
			req.reply <- err
		}
	}
}

// setFinishing marks the claims of batch as held by a completer, or no
// longer (their finish failed and will be tried again): renewal skips them
// while marked.
func (w *Worker) setFinishing(batch []*finishReq, on bool) {
	w.mu.Lock()
	for _, req := range batch {
		req.r.finishing = on
	}
	w.mu.Unlock()
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
func (w *Worker) commitFinish(batch []*finishReq) error {
	refs := make([]lease.Ref, len(batch))
	for i, req := range batch {
		refs[i] = req.r.claim.Ref
	}
	ctx, cancel := context.WithTimeout(w.lifeCtx, w.cfg.StatementTimeout)
	defer cancel()
	ctx, span := tracing.Start(ctx, "worker.finish", attribute.Int("group.size", len(batch)))
	var won map[uuid.UUID]bool // by claim id: two claims of one job may share a group
	err := pg.WithTx(ctx, w.exec, func(tx pgx.Tx) error {
		winners, err := lease.Succeed(ctx, tx, w.cfg.OwnerID, refs)
		if err != nil {
			return err
		}
		won = make(map[uuid.UUID]bool, len(winners))
		for _, wn := range winners {
			won[wn.ClaimID] = true
		}
		if w.hooks.InFinishTx != nil {
			w.hooks.InFinishTx()
		}
		var rows []etl.TargetRow
		for _, req := range batch {
			if won[req.r.claim.ClaimID] {
				rows = append(rows, req.out.Rows...)
			}
		}
		if len(rows) == 0 {
			return nil
		}
		return etl.LoadRows(ctx, tx, rows)
	})
	tracing.EndBatch(span, len(won), err)
	if err != nil {
		return err
	}
	w.m.FinishBatchSize.Observe(float64(len(won)))
	for _, req := range batch {
		if won[req.r.claim.ClaimID] {
			req.reply <- nil
		} else {
			req.reply <- lease.ErrLost
		}
	}
	return nil
}
