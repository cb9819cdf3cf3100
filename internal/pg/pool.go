package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/tracing"
)

// PoolOptions sizes a connection pool. Zero values take the defaults noted.
type PoolOptions struct {
	// MaxConns is the pool size; zero keeps the URL's pool_max_conns, else
	// pgxpool's default: the greater of 4 and runtime.NumCPU() (not GOMAXPROCS).
	MaxConns int32
	// MinConns connections are kept open; zero means none.
	MinConns int32
	// ApplicationName is reported to PostgreSQL (pg_stat_activity); empty keeps the URL's.
	ApplicationName string
	// StatementTimeout bounds every statement on the pool's connections; zero means no bound.
	StatementTimeout time.Duration
	// LockTimeout bounds every wait for a lock (lock_timeout, SQLSTATE
	// 55P03 when it fires); zero means no bound.
	LockTimeout time.Duration
	// IdleInTransactionTimeout ends a session whose transaction sits idle
	// longer (a client that vanished mid-transaction keeps no locks past
	// it); zero means no bound.
	IdleInTransactionTimeout time.Duration
	// PinnedPlans plans each prepared statement once per connection
	// (plan_cache_mode = force_generic_plan) and prices sequential scans,
	// bitmap scans, hash and merge joins and explicit sorts out of every
	// plan (enable_* = off), so the one plan is the index plan whatever the
	// tables' sizes when it was made. For pools that run only the lease
	// statements: each selects its rows by primary key (= ANY of an array,
	// or a nested loop over the presented pairs) or walks the claim queue's
	// eligibility index, so an index plan is linear in the batch at any
	// table size. Planning the claim for each call cost about as much
	// database time as running it at small batches (8 slots:
	// pg_stat_statements total_plan_time 2.7 s against total_exec_time 3.7 s).
	// A generic plan made while a table was small and left to choose could
	// be a sequential scan, kept until the next ANALYZE of the table; the
	// enable_* settings rule that out. JIT compilation is off too: a plan
	// that must still scan a small table sequentially (the chunked claim's
	// queue) carries the disabled node's huge cost, which would otherwise
	// compile it on every call (2.9-3.9 s per chunked claim, measured).
	PinnedPlans bool
	// Pooler is what sits between the pool and PostgreSQL
	// (MIGHTYETL_DATABASE_POOLER); zero means PoolerNone. PoolerTransaction
	// keeps every setting above out of the session: see PoolerTransaction.
	Pooler Pooler
}

// pinnedPlanParams are the session settings of PoolOptions.PinnedPlans.
var pinnedPlanParams = map[string]string{
	"plan_cache_mode":   "force_generic_plan",
	"enable_seqscan":    "off",
	"enable_bitmapscan": "off",
	"enable_hashjoin":   "off",
	"enable_mergejoin":  "off",
	"enable_sort":       "off",
	"jit":               "off",
}

// sessionSettings are the PostgreSQL settings opts asks for on every
// connection of the pool (by name, values as PostgreSQL reads them).
func sessionSettings(opts PoolOptions) map[string]string {
	s := map[string]string{}
	if opts.PinnedPlans {
		for k, v := range pinnedPlanParams {
			s[k] = v
		}
	}
	ms := func(d time.Duration) string { return fmt.Sprint(max(d.Milliseconds(), 1)) }
	if opts.StatementTimeout > 0 {
		s["statement_timeout"] = ms(opts.StatementTimeout)
	}
	if opts.LockTimeout > 0 {
		s["lock_timeout"] = ms(opts.LockTimeout)
	}
	if opts.IdleInTransactionTimeout > 0 {
		s["idle_in_transaction_session_timeout"] = ms(opts.IdleInTransactionTimeout)
	}
	return s
}

// NewPool connects a pgx pool to url and pings it once so that a bad URL or an
// unreachable server fails at start-up. The caller owns the pool and closes it.
// Without a pooler (opts.Pooler none) the settings of opts are startup
// parameters of every connection; with PoolerTransaction they are set in
// each transaction begun through WithTx or Begin (see PoolerTransaction).
func NewPool(ctx context.Context, url string, opts PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.MinConns > 0 {
		cfg.MinConns = opts.MinConns
	}
	if opts.ApplicationName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = opts.ApplicationName
	}
	var setLocal string
	if opts.Pooler.Transaction() {
		setLocal = setLocalSQL(configureTransactionPooling(cfg, opts))
	} else {
		for k, v := range sessionSettings(opts) {
			if _, set := cfg.ConnConfig.RuntimeParams[k]; set && isPinnedPlanParam(k) {
				continue // the URL's own planner setting wins
			}
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	}
	if tracing.Enabled() {
		// Statement spans named by statement, never by SQL text. Without
		// tracing the pool has no tracer at all.
		cfg.ConnConfig.Tracer = tracing.PGXTracer{}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	registerTxSettings(pool, setLocal)
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return pool, nil
}

// DBTX is what store functions need: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

// TxBeginner starts transactions; *pgxpool.Pool and pgx.Tx satisfy it.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// WithTx runs fn in a transaction on db (begun by Begin, so a
// PoolerTransaction pool's settings hold in it) and commits when fn returns nil. Any
// error from fn, or a panic, rolls the transaction back; the rollback runs on
// a context that survives the caller's cancellation so the connection is
// always returned clean.
func WithTx(ctx context.Context, db TxBeginner, fn func(tx pgx.Tx) error) (err error) {
	tx, err := Begin(ctx, db)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	if err = tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return nil
}
