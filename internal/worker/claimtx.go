package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
)

// A claim is the one statement whose effect the worker must learn: it
// creates leases whose claim ids only its answer carries. Run on its own
// (autocommit), a claim the worker gave up on at its deadline could still
// commit: the server finished it before pgx's cancel request arrived, or
// the request never arrived (a blocked claim whose connection broke runs
// and commits once the lock frees). Its jobs then stayed RUNNING under
// leases nobody held until they expired, an attempt spent on each. Measured
// with a 6 ms StatementTimeout: 120-133 of 300 jobs claimed in the database
// never reached the worker. TestClaimIsBoundedByTheStatementTimeout could
// fail that way under load: the job inserted after the lock claimed by a
// round that had timed out, and leased to nobody for the whole 30 s lease.
//
// So the producer claims in a transaction it commits only after it has
// read the claimed rows (claimCommitted): a claim given up on before its
// COMMIT was sent can never commit, and a claim whose COMMIT was sent is
// kept even when the answer to the COMMIT is lost, since its exact leases
// are known: if the commit did not happen, their first renewal or fenced
// write matches nothing (design invariant 2) and they end stale. The
// database bounds the claim statement itself (statement_timeout, local to
// the transaction), and the worker waits longer than that, so a slow or
// blocked claim normally ends on the server (SQLSTATE 57014) with its
// connection kept, instead of the client closing the connection.

// claimFunc is the claim statement a producer runs (lease.ClaimJobs or
// lease.ClaimChunkedJobs).
type claimFunc func(ctx context.Context, db pg.DBTX, p lease.ClaimParams) (lease.ClaimResult, error)

// errCommitUnknown marks a COMMIT that was sent and not answered: it may
// have committed. A claim's are returned with it and kept; a finish's
// claims stay finishing and the retry's fenced write decides.
var errCommitUnknown = errors.New("commit not confirmed")

// claimCommitted runs claim on one connection of db inside a transaction
// begun in the same round trip as the claim statement, and commits it once
// the claimed rows are read. The database ends the claim statement at
// bound (statement_timeout); the client gives up at bound +
// answerGrace(bound), acquiring the connection included.
//
// It returns the claims with a nil error when the COMMIT succeeded; no
// claims and the error when the claim failed, or the COMMIT was refused, or
// the deadline passed before the COMMIT was sent (nothing committed); the
// claims and an error wrapping errCommitUnknown when the COMMIT was sent
// and its answer not received (kept: see above).
func claimCommitted(ctx context.Context, db *pgxpool.Pool, bound time.Duration, claim claimFunc, p lease.ClaimParams) (lease.ClaimResult, error) {
	ctx, cancel := context.WithTimeout(ctx, bound+answerGrace(bound))
	defer cancel()
	conn, err := db.Acquire(ctx)
	if err != nil {
		return lease.ClaimResult{}, fmt.Errorf("claim jobs: acquire connection: %w", err)
	}
	// A connection released inside the transaction (an error before the
	// COMMIT) is closed by the pool, which rolls the transaction back.
	defer conn.Release()
	res, err := claim(ctx, &claimTx{DBTX: conn, timeout: fmt.Sprint(max(bound.Milliseconds(), 1))}, p)
	if err != nil {
		if ctx.Err() == nil && !conn.Conn().IsClosed() {
			// Ended by the server (its statement_timeout, a conflict):
			// roll back so the connection goes back to the pool.
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
		return lease.ClaimResult{}, err
	}
	if ctx.Err() != nil {
		// Not committed, and never will be: the connection closes.
		return lease.ClaimResult{}, fmt.Errorf("claim jobs: before commit: %w", context.Cause(ctx))
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// The server answered: it did not commit.
			return lease.ClaimResult{}, fmt.Errorf("claim jobs: commit: %w", err)
		}
		return res, fmt.Errorf("claim jobs: %w: %w", errCommitUnknown, err)
	}
	return res, nil
}

// answerGrace is how much longer than the database's bound on a statement
// (bound) the worker waits to hear what the database decided: as long
// again, at least a second.
func answerGrace(bound time.Duration) time.Duration { return max(bound, time.Second) }

// setClaimTimeoutSQL sets statement_timeout (milliseconds, as text) for
// the rest of the transaction (set_config's is_local: through a pooler too).
const setClaimTimeoutSQL = `SELECT set_config('statement_timeout', $1, true)`

// claimTx runs each Query in one round trip after BEGIN and
// setClaimTimeoutSQL: the statement runs in a transaction left open for
// the caller to end, bounded by the database at timeout milliseconds. Its
// other methods are the underlying DBTX's (the claim statements only
// Query).
type claimTx struct {
	pg.DBTX
	timeout string
}

func (c *claimTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue(setClaimTimeoutSQL, c.timeout)
	batch.Queue(sql, args...)
	br := c.DBTX.SendBatch(ctx, batch)
	for range 2 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, batch: br}, nil
}

// batchRows are the rows of a batch's last query: once they are read to
// the end (or closed) the batch is closed too, which reads the batch's end
// and frees the connection for the next statement; Err reports the batch's
// error as well as the rows'.
type batchRows struct {
	pgx.Rows
	batch    pgx.BatchResults
	closed   bool
	batchErr error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.batchErr = r.batch.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.batchErr
}
