package pg

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pooler names what sits between a process and PostgreSQL
// (MIGHTYETL_DATABASE_POOLER); it decides where a pool keeps its
// per-connection settings and how it runs statements. The zero value means
// PoolerNone.
type Pooler string

const (
	// PoolerNone: every pool connection is a PostgreSQL session of its own.
	// Settings travel as startup parameters (once per connection) and
	// statements are prepared and cached per connection (pgx's default,
	// QueryExecModeCacheStatement).
	PoolerNone Pooler = "none"
	// PoolerTransaction: the pool's connections go through a pooler in
	// transaction mode (PgBouncer pool_mode = transaction), which lends a
	// server connection for one transaction at a time, so nothing may live
	// in the session:
	//   - no startup parameters but application_name (PgBouncer refuses the
	//     ones it does not track: "unsupported startup parameter");
	//   - the pool's settings (statement_timeout, lock_timeout,
	//     idle_in_transaction_session_timeout, the PinnedPlans planner
	//     settings) are set with SET LOCAL in every transaction WithTx (and
	//     every READ COMMITTED transaction of this package) begins on the
	//     pool, in the same round trip as BEGIN; a statement run outside a
	//     transaction has none of them (its bound is the caller's context,
	//     whose cancellation pgx forwards as a cancel request, and the
	//     pooler's query_timeout);
	//   - statements run with QueryExecModeCacheDescribe: pgx caches each
	//     statement's description (parameter and result types, found with
	//     the unnamed statement) and sends every execution as Parse of the
	//     unnamed statement, Bind and Execute in one round trip, so no
	//     server-side named prepared statement exists and values keep the
	//     binary encoding the server's types ask for (QueryExecModeExec and
	//     QueryExecModeSimpleProtocol would guess types from Go values and
	//     send text). A URL that chose exec or simple_protocol
	//     (default_query_exec_mode) keeps it; cache_statement and
	//     describe_exec (whose second round trip may land on another server
	//     connection) become cache_describe.
	// LISTEN, session advisory locks, temporary tables and session SET do
	// not work through such a pooler: the outbox relay listens on
	// MIGHTYETL_DATABASE_DIRECT_URL or polls, and migrations run on a direct
	// connection (docs/operations/pgbouncer.md).
	PoolerTransaction Pooler = "transaction"
)

// ParsePooler reads a MIGHTYETL_DATABASE_POOLER value: "none" (or empty) or
// "transaction".
func ParsePooler(s string) (Pooler, error) {
	switch Pooler(s) {
	case "", PoolerNone:
		return PoolerNone, nil
	case PoolerTransaction:
		return PoolerTransaction, nil
	}
	return "", fmt.Errorf("unknown pooler %q (want none or transaction)", s)
}

// Transaction reports whether p is PoolerTransaction.
func (p Pooler) Transaction() bool { return p == PoolerTransaction }

// trackedStartupParams are the startup parameters PgBouncer (1.18) passes
// on in transaction mode; any other one is refused at connect.
var trackedStartupParams = []string{"application_name", "client_encoding", "datestyle", "timezone", "standard_conforming_strings"}

// configureTransactionPooling adapts cfg for PoolerTransaction: the
// settings of opts (which NewPool otherwise sends as startup parameters)
// become txSettings, set per transaction; the query mode is one without
// named prepared statements.
func configureTransactionPooling(cfg *pgxpool.Config, opts PoolOptions) (txSettings map[string]string) {
	switch cfg.ConnConfig.DefaultQueryExecMode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheDescribe:
	default:
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	// pgx puts the URL's unknown query parameters into RuntimeParams; those
	// PgBouncer does not track would fail every connect. Apply them per
	// transaction instead, with the pool's own settings on top.
	txSettings = map[string]string{}
	for k, v := range cfg.ConnConfig.RuntimeParams {
		if !slices.Contains(trackedStartupParams, strings.ToLower(k)) {
			txSettings[k] = v
			delete(cfg.ConnConfig.RuntimeParams, k)
		}
	}
	for k, v := range sessionSettings(opts) {
		if _, set := txSettings[k]; !set || !isPinnedPlanParam(k) { // the URL's own planner setting wins, as without a pooler
			txSettings[k] = v
		}
	}
	return txSettings
}

func isPinnedPlanParam(k string) bool { _, ok := pinnedPlanParams[k]; return ok }

// setLocalSQL is the statement that sets settings for the rest of one
// transaction: one set_config(name, value, true) per setting, in name order,
// with names and values as literals (they come from the configuration, never
// from a request). Empty for no settings.
func setLocalSQL(settings map[string]string) string {
	if len(settings) == 0 {
		return ""
	}
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, k := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "set_config(%s, %s, true)", quoteLiteral(k), quoteLiteral(settings[k]))
	}
	return b.String()
}

// quoteLiteral quotes s as a standard-conforming SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// txSettingsByPool maps a PoolerTransaction pool (weakly, so a closed and
// dropped pool leaves nothing behind) to its setLocalSQL.
var txSettingsByPool sync.Map // weak.Pointer[pgxpool.Pool] -> string

func registerTxSettings(p *pgxpool.Pool, setLocal string) {
	if setLocal == "" {
		return
	}
	k := weak.Make(p)
	txSettingsByPool.Store(k, setLocal)
	runtime.AddCleanup(p, func(k weak.Pointer[pgxpool.Pool]) { txSettingsByPool.Delete(k) }, k)
}

// txSetLocal is the SET LOCAL statement of db's transactions: non-empty for
// a PoolerTransaction pool with settings.
func txSetLocal(db any) string {
	p, ok := db.(*pgxpool.Pool)
	if !ok || p == nil {
		return ""
	}
	v, ok := txSettingsByPool.Load(weak.Make(p))
	if !ok {
		return ""
	}
	return v.(string)
}

// beginSQL is the BEGIN statement of o (as pgx writes it), followed by
// setLocal in the same simple-protocol message when it is not empty: one
// round trip begins the transaction and sets its settings.
func beginSQL(o pgx.TxOptions, setLocal string) string {
	var b strings.Builder
	b.WriteString("begin")
	if o.IsoLevel != "" {
		b.WriteString(" isolation level " + string(o.IsoLevel))
	}
	if o.AccessMode != "" {
		b.WriteString(" " + string(o.AccessMode))
	}
	if o.DeferrableMode != "" {
		b.WriteString(" " + string(o.DeferrableMode))
	}
	if setLocal != "" {
		b.WriteString("; " + setLocal)
	}
	return b.String()
}

// beginTx begins a transaction with o on db, with db's per-transaction
// settings when db is a PoolerTransaction pool.
func beginTx(ctx context.Context, db TxStarter, o pgx.TxOptions) (pgx.Tx, error) {
	if s := txSetLocal(db); s != "" && o.BeginQuery == "" {
		o.BeginQuery = beginSQL(o, s)
	}
	return db.BeginTx(ctx, o)
}

// Begin begins a transaction on db. For a PoolerTransaction pool it also
// sets the pool's settings for the transaction (see PoolerTransaction), in
// the same round trip; on anything else it is db.Begin.
func Begin(ctx context.Context, db TxBeginner) (pgx.Tx, error) {
	if s, ok := db.(TxStarter); ok && txSetLocal(db) != "" {
		return beginTx(ctx, s, pgx.TxOptions{})
	}
	return db.Begin(ctx)
}
