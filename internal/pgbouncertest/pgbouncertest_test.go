package pgbouncertest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/pgbouncertest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBouncerPoolsInTransactionMode: through the bouncer, statements run on
// the upstream server in the client's database, two clients' transactions
// share one server connection (pool size 1), a startup parameter PgBouncer
// does not track is refused, and the admin console answers.
func TestBouncerPoolsInTransactionMode(t *testing.T) {
	_, direct := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 1})
	b := pgbouncertest.Start(t, pgbouncertest.Options{PoolSize: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	connect := func(raw string) *pgx.Conn {
		t.Helper()
		cfg, err := pgx.ParseConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("connect through pgbouncer: %v", err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	via := b.URL(direct)
	a, c := connect(via), connect(via)
	var dbA, dbC string
	var pidA, pidC int
	if err := a.QueryRow(ctx, "SELECT current_database(), pg_backend_pid()").Scan(&dbA, &pidA); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "SELECT current_database(), pg_backend_pid()").Scan(&dbC, &pidC); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimPrefix(mustPath(t, direct), "/"); dbA != want || dbC != want {
		t.Fatalf("databases through pgbouncer = %q, %q, want %q", dbA, dbC, want)
	}
	if pidA != pidC {
		t.Fatalf("two clients got server backends %d and %d with default_pool_size=1: not pooled", pidA, pidC)
	}

	cfg, err := pgx.ParseConfig(via)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	if conn, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		_ = conn.Close(ctx)
		t.Fatal("pgbouncer accepted the startup parameter plan_cache_mode; production PgBouncer refuses it")
	} else if !strings.Contains(err.Error(), "unsupported startup parameter") {
		t.Fatalf("startup parameter refused with %v, want unsupported startup parameter", err)
	}

	admin, err := pgx.Connect(ctx, b.AdminURL())
	if err != nil {
		t.Fatalf("admin console: %v", err)
	}
	defer admin.Close(ctx)
	rows, err := admin.Query(ctx, "SHOW POOLS")
	if err != nil {
		t.Fatalf("SHOW POOLS: %v", err)
	}
	pools := 0
	for rows.Next() {
		pools++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if pools == 0 {
		t.Fatal("SHOW POOLS listed no pool after two clients connected")
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestLaunchMissingBinary: without the binary, Launch names the fix in one
// line.
func TestLaunchMissingBinary(t *testing.T) {
	_, err := pgbouncertest.Launch(context.Background(), pgbouncertest.Options{
		Upstream: pgtest.LocalURL, Binary: "/nonexistent/pgbouncer"})
	if err == nil || !strings.Contains(err.Error(), "start pgbouncer") {
		t.Fatalf("Launch with a missing binary = %v, want a start error", err)
	}
}

func mustPath(t *testing.T, raw string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	return "/" + cfg.Database
}
