package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgbouncertest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// cliBackfill is a backfill of a table the test creates: the product's
// registry (pg.Backfills) carries none.
var cliBackfill = pg.Backfill{
	Name:        "cli_test_fill",
	Description: "cli_t.b = a + 1",
	Remaining:   `SELECT count(*) FROM cli_t WHERE b IS NULL`,
	Batch: `WITH todo AS (SELECT id FROM cli_t WHERE b IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE cli_t t SET b = t.a + 1, n = t.n + 1 FROM todo WHERE t.id = todo.id`,
}

func backfillCLI(ctx context.Context, reg *pg.BackfillRegistry, env map[string]string, args ...string) (int, string, string) {
	var out, errOut strings.Builder
	code := runBackfillWith(ctx, args, reg, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

// `etlctl backfill list|status|run`: list names the registry's backfills,
// status counts what remains, run does it in batches of -batch-size,
// printing progress, and exits 0 with nothing left; a run whose context
// ends (SIGINT/SIGTERM) exits 3 with the rows left, and the next run
// finishes them; unknown names and verbs are usage errors.
func TestBackfillCommand(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 2})
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE cli_t (id int PRIMARY KEY, a int NOT NULL, b int, n int NOT NULL DEFAULT 0);
		INSERT INTO cli_t (id, a) SELECT g, g FROM generate_series(1, 25) g`); err != nil {
		t.Fatal(err)
	}
	reg := &pg.BackfillRegistry{}
	if err := reg.Register(cliBackfill); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": url}

	if code, out, _ := backfillCLI(ctx, reg, env, "list"); code != 0 || out != "cli_test_fill\tcli_t.b = a + 1\n" {
		t.Fatalf("list: exit %d, %q", code, out)
	}
	if code, out, errOut := backfillCLI(ctx, reg, env, "status"); code != 0 || out != "cli_test_fill\tremaining 25\n" {
		t.Fatalf("status: exit %d, %q %s", code, out, errOut)
	}
	for _, args := range [][]string{{"run"}, {"run", "nope"}, {"status", "nope"}, {"frob"}, {"run", "cli_test_fill", "-batch-size", "0"}} {
		if code, _, _ := backfillCLI(ctx, reg, env, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}

	// Stopped before its first batch: exit 3, nothing done, all remain.
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	code, out, errOut := backfillCLI(stopped, reg, env, "run", "cli_test_fill", "-batch-size", "10")
	if code != exitBackfillStopped || !strings.Contains(out, "stopped: 0 rows this run; 25 remain") {
		t.Fatalf("stopped run: exit %d\n%s%s", code, out, errOut)
	}

	env["MIGHTYETL_BACKFILL_BATCH_SIZE"] = "10" // the variable works like the flag
	code, out, errOut = backfillCLI(ctx, reg, env, "run", "cli_test_fill")
	want := "backfill cli_test_fill: 25 rows to do, batches of 10\n" +
		"batch 1: 10 rows (10 this run)\nbatch 2: 10 rows (20 this run)\nbatch 3: 5 rows (25 this run)\n" +
		"done: 25 rows this run; 0 remain\n"
	if code != 0 || out != want {
		t.Fatalf("run: exit %d\n%s\nwant\n%s%s", code, out, want, errOut)
	}
	var wrong int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM cli_t WHERE b IS DISTINCT FROM a + 1 OR n <> 1`).Scan(&wrong); err != nil || wrong != 0 {
		t.Fatalf("%d rows not done exactly once (%v)", wrong, err)
	}
	if code, out, _ := backfillCLI(ctx, reg, env, "run", "cli_test_fill", "-batch-size", "7"); code != 0 || !strings.HasSuffix(out, "done: 0 rows this run; 0 remain\n") {
		t.Fatalf("run with nothing left: exit %d\n%s", code, out)
	}
	if code, out, _ := backfillCLI(ctx, reg, env, "status", "cli_test_fill"); code != 0 || out != "cli_test_fill\tremaining 0\n" {
		t.Fatalf("status after: exit %d, %q", code, out)
	}
}

// The product's registry holds only valid entries, each listed by `etlctl
// backfill list` (an empty registry lists nothing and says so).
func TestBackfillListProductRegistry(t *testing.T) {
	code, out, errOut := backfillCLI(context.Background(), pg.Backfills, map[string]string{}, "list")
	if code != 0 {
		t.Fatalf("list: exit %d %s", code, errOut)
	}
	var want strings.Builder
	for _, b := range pg.Backfills.List() {
		fmt.Fprintf(&want, "%s\t%s\n", b.Name, b.Description)
	}
	if out != want.String() || (want.Len() == 0) != strings.Contains(errOut, "carries no backfill") {
		t.Fatalf("list: %q (stderr %q), want %q", out, errOut, want.String())
	}
}

// Behind PgBouncer in transaction mode (MIGHTYETL_DATABASE_POOLER=
// transaction) `etlctl backfill` runs on DATABASE_URL itself: each batch
// is one transaction, its timeouts SET LOCAL.
func TestBackfillCommandThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	pool, direct := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 2})
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE cli_t (id int PRIMARY KEY, a int NOT NULL, b int, n int NOT NULL DEFAULT 0);
		INSERT INTO cli_t (id, a) SELECT g, g FROM generate_series(1, 30) g`); err != nil {
		t.Fatal(err)
	}
	reg := &pg.BackfillRegistry{}
	if err := reg.Register(cliBackfill); err != nil {
		t.Fatal(err)
	}
	b := pgbouncertest.Start(t, pgbouncertest.Options{PoolSize: 2})
	env := map[string]string{"DATABASE_URL": b.URL(direct), "MIGHTYETL_DATABASE_POOLER": "transaction"}
	code, out, errOut := backfillCLI(ctx, reg, env, "run", "cli_test_fill", "-batch-size", "8")
	if code != 0 || !strings.HasSuffix(out, "done: 30 rows this run; 0 remain\n") {
		t.Fatalf("run through PgBouncer: exit %d\n%s%s", code, out, errOut)
	}
	var wrong int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM cli_t WHERE b IS DISTINCT FROM a + 1 OR n <> 1`).Scan(&wrong); err != nil || wrong != 0 {
		t.Fatalf("%d rows not done exactly once (%v)", wrong, err)
	}
}
