package pg_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgbouncertest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

func TestParsePooler(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want pg.Pooler
		ok   bool
	}{
		{"", pg.PoolerNone, true},
		{"none", pg.PoolerNone, true},
		{"transaction", pg.PoolerTransaction, true},
		{"session", "", false},
		{"Transaction", "", false},
	} {
		got, err := pg.ParsePooler(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePooler(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// poolerOptions are the worker execution pool's settings: every kind of
// setting NewPool sends as startup parameters without a pooler.
var poolerOptions = pg.PoolOptions{MaxConns: 3, ApplicationName: "mightyetl-pooler-test", PinnedPlans: true,
	StatementTimeout: 7 * time.Second, LockTimeout: 3 * time.Second, IdleInTransactionTimeout: 11 * time.Second}

// TestPoolerNoneFailsThroughPgBouncer is the failure mode of issue 31:
// with the default settings, a pool through PgBouncer in transaction mode
// cannot even connect (a session setting as a startup parameter is
// refused), and a pool with no settings at all breaks on pgx's statement
// cache as soon as two clients share a server connection.
func TestPoolerNoneFailsThroughPgBouncer(t *testing.T) {
	_, direct := pgtest.NewDatabase(t, pgtest.Options{MaxConns: 1})
	b := pgbouncertest.Start(t, pgbouncertest.Options{PoolSize: 1})
	via := b.URL(direct)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if p, err := pg.NewPool(ctx, via, poolerOptions); err == nil {
		p.Close()
		t.Fatal("pooler=none pool with session settings connected through PgBouncer transaction mode")
	} else if !strings.Contains(err.Error(), "unsupported startup parameter") {
		t.Fatalf("pooler=none pool through PgBouncer: %v, want unsupported startup parameter", err)
	}

	// No settings: connects, but pgx's default mode names a prepared
	// statement per SQL text and connection; the second client preparing
	// the same text on the one shared server connection collides.
	a, err := pg.NewPool(ctx, via, pg.PoolOptions{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, err := pg.NewPool(ctx, via, pg.PoolOptions{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const q = "SELECT count(*) FROM etl_job_records WHERE job_status = $1"
	var n int
	if err := a.QueryRow(ctx, q, "PENDING").Scan(&n); err != nil {
		t.Fatalf("first client: %v", err)
	}
	err = c.QueryRow(ctx, q, "PENDING").Scan(&n)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P05" {
		t.Fatalf("second client's cached statement on the shared server connection = %v, want 42P05 duplicate_prepared_statement", err)
	}
}

// TestPoolerTransactionThroughPgBouncer: the same settings with
// pooler=transaction connect, run statements outside and inside
// transactions from several clients over one server connection, and hold
// exactly inside WithTx transactions (and READ COMMITTED ones), never
// leaking into the shared session.
func TestPoolerTransactionThroughPgBouncer(t *testing.T) {
	_, direct := pgtest.NewDatabase(t, pgtest.Options{MaxConns: 1})
	b := pgbouncertest.Start(t, pgbouncertest.Options{PoolSize: 1})
	via := b.URL(direct)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	o := poolerOptions
	o.Pooler = pg.PoolerTransaction
	a, err := pg.NewPool(ctx, via, o)
	if err != nil {
		t.Fatalf("pooler=transaction pool through PgBouncer: %v", err)
	}
	defer a.Close()
	c, err := pg.NewPool(ctx, via, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if m := a.Config().ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeCacheDescribe {
		t.Fatalf("query exec mode = %v, want cache_describe", m)
	}

	// Same SQL from both clients, several times, on the one server
	// connection: no named statement to collide.
	const q = "SELECT count(*) FROM etl_job_records WHERE job_status = $1"
	for i := range 3 {
		for _, p := range []interface {
			QueryRow(context.Context, string, ...any) pgx.Row
		}{a, c} {
			var n int
			if err := p.QueryRow(ctx, q, "PENDING").Scan(&n); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
	}

	want := map[string]string{"statement_timeout": "7s", "lock_timeout": "3s",
		"idle_in_transaction_session_timeout": "11s", "enable_seqscan": "off", "plan_cache_mode": "force_generic_plan"}
	show := func(q pg.DBTX) map[string]string {
		t.Helper()
		got := map[string]string{}
		for k := range want {
			var v string
			if err := q.QueryRow(ctx, "SELECT current_setting($1)", k).Scan(&v); err != nil {
				t.Fatal(err)
			}
			got[k] = v
		}
		return got
	}
	err = pg.WithTx(ctx, a, func(tx pgx.Tx) error {
		for k, v := range show(tx) {
			if v != want[k] {
				t.Errorf("in WithTx: %s = %q, want %q", k, v, want[k])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pg.Begin(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := show(tx)["lock_timeout"]; got != "3s" {
		t.Errorf("in pg.Begin: lock_timeout = %q, want 3s", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Outside a transaction, on the same (only) server connection: the
	// server's defaults, so nothing leaked into the session.
	for k, v := range show(c) {
		if v == want[k] {
			t.Errorf("outside a transaction: %s = %q: a transaction's setting leaked into the shared session", k, v)
		}
	}
	// READ COMMITTED transactions of this package (prune, replay) too.
	var iso, st string
	if err := pg.InReadCommittedForTest(ctx, a, func(q pg.DBTX) error {
		if err := q.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&iso); err != nil {
			return err
		}
		return q.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&st)
	}); err != nil {
		t.Fatal(err)
	}
	if iso != "read committed" || st != "7s" {
		t.Fatalf("READ COMMITTED transaction: isolation %q, statement_timeout %q; want read committed, 7s", iso, st)
	}
}

// TestPoolerTransactionDirect: pooler=transaction on a direct connection
// works as well (the settings per transaction, none in the session), so a
// deployment may switch the setting before it puts the pooler in.
func TestPoolerTransactionDirect(t *testing.T) {
	_, direct := pgtest.NewDatabase(t, pgtest.Options{MaxConns: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := poolerOptions
	o.Pooler = pg.PoolerTransaction
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	qs := u.Query()
	qs.Set("search_path", "public")
	u.RawQuery = qs.Encode()
	p, err := pg.NewPool(ctx, u.String(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var st, sp string
	if err := pg.WithTx(ctx, p, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('search_path')").Scan(&st, &sp)
	}); err != nil {
		t.Fatal(err)
	}
	if st != "7s" || sp != "public" {
		t.Fatalf("in a transaction: statement_timeout %q, search_path %q; want 7s, public (the URL's parameter, per transaction)", st, sp)
	}
	if _, set := p.Config().ConnConfig.RuntimeParams["search_path"]; set {
		t.Fatal("search_path is still a startup parameter with pooler=transaction")
	}
}
