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
)

// finishReq asks a completer to commit one successful job.
type finishReq struct {
	r     *running
	out   Output
	reply chan error // nil: won and committed; lease.ErrLost: lost; other: nothing committed
}

// finishSuccess hands a successful result to the completers and waits for
// its commit, through fencedWrite: a database error is retried while the
// lease is ours; a lost lease is final. (The completer bounds the finish
// transaction with its own timeout.)
func (w *Worker) finishSuccess(r *running, out Output) string {
	return w.fencedWrite(r, metrics.OutcomeSucceeded, func(context.Context) error {
		req := &finishReq{r: r, out: out, reply: make(chan error, 1)}
		w.finishQ <- req
		return <-req.reply
	})
}

// completer commits finished jobs in groups: whatever is queued when a
// transaction starts, plus what arrives within FinishLinger of the first
// result, up to FinishBatch, shares it.
func (w *Worker) completer() {
	defer w.finishWG.Done()
	batch := make([]*finishReq, 0, w.cfg.FinishBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		select {
		case req := <-w.finishQ:
			batch = append(batch[:0], req)
		drain:
			for len(batch) < w.cfg.FinishBatch {
				select {
				case more := <-w.finishQ:
					batch = append(batch, more)
				default:
					break drain
				}
			}
			if len(batch) < w.cfg.FinishBatch && w.cfg.FinishLinger > 0 {
				linger.Reset(w.cfg.FinishLinger)
			wait:
				for len(batch) < w.cfg.FinishBatch {
					select {
					case more := <-w.finishQ:
						batch = append(batch, more)
					case <-linger.C:
						break wait
					case <-w.finishStop:
						break wait
					}
				}
				linger.Stop()
			}
			w.commitGroup(batch)
		case <-w.finishStop:
			return
		}
	}
}

// commitGroup commits a group; if the group fails for a reason other than an
// unavailable database, each job is tried alone so one bad job cannot block
// the others.
func (w *Worker) commitGroup(batch []*finishReq) {
	err := w.commitFinish(batch)
	if err != nil && len(batch) > 1 && !isTransientDB(err) {
		for _, req := range batch {
			req.reply <- w.commitFinish([]*finishReq{req})
		}
		return
	}
	for _, req := range batch {
		if err != nil {
			req.reply <- err
		}
	}
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
	ctx, cancel := context.WithTimeout(w.lifeCtx, max(w.cfg.RenewInterval, 5*time.Second))
	defer cancel()
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
