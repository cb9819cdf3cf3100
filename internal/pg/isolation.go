package pg

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// TxStarter begins transactions with explicit options; *pgxpool.Pool and
// *pgx.Conn satisfy it. A pgx.Tx does not: its nested transactions are
// savepoints that keep the enclosing transaction's isolation level.
type TxStarter interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// readCommitted is the isolation level of every transaction that deletes
// jobs or inserts replays, whatever the session's
// default_transaction_isolation: the replay lineage guards (migrations 00017
// and 00019) see a concurrent replay or delete only through the fresh
// snapshot each statement takes at READ COMMITTED, and the after-delete
// guard refuses (40001) a delete at any other level.
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// readCommittedBeginner is a TxBeginner whose transactions begin at READ
// COMMITTED.
type readCommittedBeginner struct{ db TxStarter }

func (b readCommittedBeginner) Begin(ctx context.Context) (pgx.Tx, error) {
	return beginTx(ctx, b.db, readCommitted)
}

// withReadCommittedTx is WithTx at READ COMMITTED when db can begin a
// transaction with options (a pool or a connection). A db that cannot (a
// pgx.Tx, whose Begin makes a savepoint) runs fn at its transaction's level.
func withReadCommittedTx(ctx context.Context, db TxBeginner, fn func(tx pgx.Tx) error) error {
	if s, ok := db.(TxStarter); ok {
		return WithTx(ctx, readCommittedBeginner{s}, fn)
	}
	return WithTx(ctx, db, fn)
}

// inReadCommitted runs fn with a transaction begun at READ COMMITTED when db
// can begin one with options (a pool or a connection), committing it when fn
// returns nil; otherwise (a pgx.Tx) it runs fn on db, at its transaction's
// level.
func inReadCommitted(ctx context.Context, db DBTX, fn func(q DBTX) error) error {
	if s, ok := db.(TxStarter); ok {
		return WithTx(ctx, readCommittedBeginner{s}, func(tx pgx.Tx) error { return fn(tx) })
	}
	return fn(db)
}
