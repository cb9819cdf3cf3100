package chunked

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/client/backoff"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// How the chunks of one load commit (Loader.commitChunks). Each chunk is
// one transaction: its rows by COPY and its skipped records, then the
// fenced lock of the exact lease, the checkpoint from the previous chunk's
// and the commit. Up to Config.Connections of them are open at once, each
// on a goroutine and a connection of its own, so the next chunks copy their
// rows while the first one copies or commits; but a chunk's fence,
// checkpoint and commit wait until the chunk before it committed, so the
// chunks commit in payload order, each from the checkpoint the one before
// it committed, exactly as if they ran one after the other. A chunk that
// fails rolls back, and so do the chunks opened after it (their checkpoint
// would not follow); it is tried again alone, as chunkCommitTries allows,
// then the others are opened again.

// span is the checkpoint a chunk commits from and the one it commits.
type span struct{ from, to lease.Checkpoint }

// chunkTx is one chunk's transaction in flight (Loader.open).
type chunkTx struct {
	c *chunk
	// copied receives nil once the rows are copied, or the transaction's
	// error when it ended before (it rolled back).
	copied chan error
	// finish sends the span to commit with; closed, the transaction rolls
	// back.
	finish chan span
	// done receives the transaction's outcome (nil: committed).
	done chan error
}

// errAbandoned rolls back a chunk whose predecessor did not commit.
var errAbandoned = errors.New("chunked load: chunk abandoned")

// next is the checkpoint after chunk c from cp.
func next(cp lease.Checkpoint, c *chunk) lease.Checkpoint {
	return lease.Checkpoint{ChunksDone: cp.ChunksDone + 1, RecordsLoaded: cp.RecordsLoaded + int64(c.rows.Len()),
		BadRecords: cp.BadRecords + int64(len(c.badNums)),
		NextPart:   c.nextStart.Part, NextOffset: c.nextStart.Offset, NextRecord: c.nextStart.Record}
}

// open begins chunk c's transaction on a goroutine of its own: the rows are
// copied at once; the fence, the checkpoint and the commit wait for finish.
func (l *Loader) open(ctx context.Context, ref lease.Ref, c *chunk) *chunkTx {
	t := &chunkTx{c: c, copied: make(chan error, 1), finish: make(chan span, 1), done: make(chan error, 1)}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, l.cfg.StatementTimeout)
		defer cancel()
		copied := false
		err := errAbandoned // what a goroutine that exits early (a test hook's Goexit) reports
		defer func() {
			if !copied {
				t.copied <- err
			}
			t.done <- err
		}()
		err = pg.WithTx(ctx, l.db, func(tx pgx.Tx) error {
			if err := l.copyChunk(ctx, tx, ref, c); err != nil {
				return err
			}
			copied = true
			t.copied <- nil
			var sp span
			var ok bool
			select {
			case sp, ok = <-t.finish:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if !ok {
				return errAbandoned
			}
			return l.fenceChunk(ctx, tx, ref, sp, c)
		})
	}()
	return t
}

// abandon rolls back t, which was not told to finish, and waits for it.
func (t *chunkTx) abandon() {
	close(t.finish)
	<-t.done
}

// commitChunks commits the chunks the reader sends on out, in order, from
// checkpoint cp, returning each chunk's memory to free once committed. It
// returns nil after the chunk that ends the payload, the error of a chunk
// the reader could not build once the chunks before it committed, or the
// error that stopped a commit (Load's errors). It opens a chunk's
// transaction as soon as the reader sent it and fewer than
// Config.Connections are open, also while it waits for the first one.
func (l *Loader) commitChunks(ctx context.Context, ref lease.Ref, cp lease.Checkpoint, out <-chan *chunk, free chan<- *chunk) error {
	var (
		queue   []*chunk   // received, not open (abandoned ones), in order
		running []*chunkTx // open, in order
		told    bool       // running[0] was sent its span
		ended   bool       // the reader sent its last chunk (or stopped)
		endErr  error      // what the load returns once the chunks before it committed
	)
	abandon := func() {
		back := make([]*chunk, 0, len(running)+len(queue))
		for _, t := range running {
			t.abandon()
			back = append(back, t.c)
		}
		queue, running, told = append(back, queue...), nil, false
	}
	defer abandon()
	for {
		for len(running) < l.cfg.Connections && len(queue) > 0 {
			running = append(running, l.open(ctx, ref, queue[0]))
			queue = queue[1:]
		}
		if len(running) == 0 && ended {
			return endErr // every chunk before the end committed
		}
		var recv <-chan *chunk
		if !ended && len(running)+len(queue) < l.cfg.Connections {
			recv = out
		}
		var copied, done <-chan error
		if len(running) > 0 {
			if told {
				done = running[0].done
			} else {
				copied = running[0].copied
			}
		}
		var err error
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case c, ok := <-recv:
			switch {
			case !ok:
				// The reader stops without a last chunk only when ctx is done.
				ended, endErr = true, context.Cause(ctx)
			case c.err != nil:
				ended, endErr = true, c.err
			default:
				ended = c.eof
				if c.records > 0 {
					queue = append(queue, c)
				} else {
					free <- c
				}
			}
			continue
		case err = <-copied:
			if err == nil {
				running[0].finish <- span{from: cp, to: next(cp, running[0].c)}
				told = true
				continue
			}
			<-running[0].done // it rolled back
		case err = <-done:
		}
		head := running[0]
		running, told = running[1:], false
		to := next(cp, head.c)
		if err == nil {
			l.committed(to, head.c)
		} else {
			// The chunks opened after it would not follow its checkpoint:
			// roll them back, try it alone, then open them again.
			abandon()
			if to, err = l.commit(ctx, ref, cp, head.c, err); err != nil {
				return err
			}
		}
		cp = to
		free <- head.c
	}
}

// committed records chunk c's commit (its checkpoint to).
func (l *Loader) committed(to lease.Checkpoint, c *chunk) {
	l.observe(metrics.ChunkCommitted, int64(c.rows.Len()))
	if l.Hooks.AfterChunkCommit != nil {
		l.Hooks.AfterChunkCommit(to.ChunksDone)
	}
}

// commit commits chunk c from checkpoint cp alone, trying a transient
// database failure again a few times (nothing of a failed try committed).
// failed is the outcome of the chunk's first try, made in the pipeline;
// nil: none was made.
func (l *Loader) commit(ctx context.Context, ref lease.Ref, cp lease.Checkpoint, c *chunk, failed error) (lease.Checkpoint, error) {
	to := next(cp, c)
	for try := 1; ; try++ {
		err := failed
		if try > 1 || failed == nil {
			err = l.commitOnce(ctx, ref, span{from: cp, to: to}, c)
		}
		switch {
		case err == nil:
			l.committed(to, c)
			return to, nil
		case errors.Is(err, lease.ErrLost):
			l.observe(metrics.ChunkStale, 0)
			return cp, fmt.Errorf("commit chunk: %w", err)
		}
		l.observe(metrics.ChunkFailed, 0)
		if ctx.Err() != nil {
			return cp, context.Cause(ctx)
		}
		if !pg.IsTransient(err) {
			// A row the target refused, a constraint: trying again cannot help.
			return cp, fmt.Errorf("%w: %w", ErrTarget, err)
		}
		if try >= chunkCommitTries {
			return cp, fmt.Errorf("%w: %w", ErrTransient, err)
		}
		t := time.NewTimer(backoff.Capped(100*time.Millisecond, 2*time.Second, try))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return cp, context.Cause(ctx)
		}
	}
}

const insertBadRecordsSQL = `
INSERT INTO etl_chunked_load_bad_records (job_record_id, record_number, error_code)
SELECT $1, b.record_number, b.error_code FROM unnest($2::bigint[], $3::text[]) AS b(record_number, error_code)`

// commitOnce is one chunk transaction, alone: copyChunk, then fenceChunk.
func (l *Loader) commitOnce(ctx context.Context, ref lease.Ref, sp span, c *chunk) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.StatementTimeout)
	defer cancel()
	return pg.WithTx(ctx, l.db, func(tx pgx.Tx) error {
		if err := l.copyChunk(ctx, tx, ref, c); err != nil {
			return err
		}
		return l.fenceChunk(ctx, tx, ref, sp, c)
	})
}

// copyChunk writes chunk c's rows (COPY) and its skipped records in tx.
func (l *Loader) copyChunk(ctx context.Context, tx pgx.Tx, ref lease.Ref, c *chunk) error {
	if err := c.rows.Load(ctx, tx); err != nil {
		return err
	}
	if len(c.badNums) > 0 {
		if _, err := tx.Exec(ctx, insertBadRecordsSQL, ref.JobID, c.badNums, c.badCodes); err != nil {
			return fmt.Errorf("insert bad records: %w", err)
		}
	}
	return nil
}

// fenceChunk ends chunk c's transaction tx after its rows: the fenced lock
// of the exact lease (zero rows: lost, and the transaction rolls back with
// nothing written), then the checkpoint from sp.from to sp.to under the
// exact lease again. The fence comes after the rows so that the job row is
// locked only for the checkpoint and the commit, not through the COPY:
// renewal, which skips a locked row (busy) rather than wait, finds it free
// almost always though the chunks follow each other without a gap, and
// what the fence protects (no claim, cancellation or renewal of the row
// between the lease's check and the commit) is the same.
func (l *Loader) fenceChunk(ctx context.Context, tx pgx.Tx, ref lease.Ref, sp span, c *chunk) error {
	if l.Hooks.BeforeFence != nil {
		l.Hooks.BeforeFence(ctx, tx, sp.to.ChunksDone)
	}
	if err := lease.FenceChunk(ctx, tx, ref); err != nil {
		return err
	}
	if l.Hooks.InChunkTx != nil {
		l.Hooks.InChunkTx(ctx, sp.to.ChunksDone)
	}
	return lease.CheckpointChunk(ctx, tx, ref, sp.from, sp.to, int64(c.rows.Len()), int64(len(c.badNums)))
}
