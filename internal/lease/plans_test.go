package lease_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// explainExecute runs EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE of the prepared
// statement name with args (SQL literals) on conn, in a transaction it rolls
// back, and returns every node as "type relation index", and the most rows
// any node over a job table produced in all its loops.
func explainExecute(t *testing.T, conn *pgxpool.Conn, name, args string) (nodes []string, maxRows float64) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var out []byte
	if err := tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE %s(%s)", pgx.Identifier{name}.Sanitize(), args)).Scan(&out); err != nil {
		t.Fatalf("explain execute: %v", err)
	}
	for _, n := range pgtest.PlanNodes(t, out) {
		nodes = append(nodes, strings.TrimSpace(n.NodeType+" "+n.RelationName+" "+n.IndexName))
		if strings.HasPrefix(n.RelationName, "etl_job_") {
			maxRows = max(maxRows, n.ActualRows*n.ActualLoops)
		}
	}
	return nodes, maxRows
}

// preparedPlans returns the name of the statement prepared for sql on conn
// and how many generic and custom plans it has been run with.
func preparedPlans(t *testing.T, conn *pgxpool.Conn, sql string) (name string, generic, custom int64) {
	t.Helper()
	if err := conn.QueryRow(context.Background(), `SELECT name, generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement = $1`, sql).Scan(&name, &generic, &custom); err != nil {
		t.Fatalf("prepared statement: %v", err)
	}
	return name, generic, custom
}

// A worker's pools (pg.PoolOptions.PinnedPlans) plan each lease statement
// once per connection. The plan is made when the statement is first run,
// here on two jobs; the tables then grow to 100,000 jobs with no ANALYZE
// (autovacuum off: nothing invalidates the plan). The claim, renewal and
// success keep running that one plan (no custom plan at all), and it is
// still an index plan that reads O(batch) rows: no sequential or bitmap
// scan, no hash or merge join, no sort.
func TestPinnedPlansStayIndexPlansAfterTheTablesGrow(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `ALTER TABLE etl_job_records SET (autovacuum_enabled = false);
		ALTER TABLE etl_job_claim_queue SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	pinned, err := pg.NewPool(ctx, url, pg.PoolOptions{MaxConns: 1, PinnedPlans: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pinned.Close)
	conn, err := pinned.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	const owner = "worker-pinned"
	cycle := func(limit int) []lease.Ref {
		t.Helper()
		res, err := lease.ClaimJobs(ctx, conn, lease.ClaimParams{OwnerID: owner, Limit: limit, LeaseDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Claimed) != limit {
			t.Fatalf("claimed %d, want %d", len(res.Claimed), limit)
		}
		refs := make([]lease.Ref, len(res.Claimed))
		for i, c := range res.Claimed {
			refs[i] = c.Ref
		}
		if _, err := lease.Renew(ctx, conn, owner, refs, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := pg.WithTx(ctx, conn, func(tx pgx.Tx) error {
			won, err := lease.Succeed(ctx, tx, owner, refs)
			if err == nil && len(won) != len(refs) {
				err = fmt.Errorf("%d of %d won", len(won), len(refs))
			}
			return err
		}); err != nil {
			t.Fatalf("succeed: %v", err)
		}
		return refs
	}

	// The plans are made on two jobs.
	pgtest.InsertN(t, pool, 2, pg.NewJob{MaxAttempts: 3})
	cycle(2)

	// 100,000 more jobs, no ANALYZE.
	if _, err := pool.Exec(ctx, `
		WITH ins AS (
		    INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
		                                 request_digest, request_payload, max_attempts)
		    SELECT gen_random_uuid(), 'diagnostic', sha256(convert_to('pinned-owner', 'UTF8')),
		           sha256(convert_to('pinned-' || g, 'UTF8')), sha256(convert_to('{}', 'UTF8')), '{}', 3
		    FROM generate_series(1, 100000) g
		    RETURNING job_record_id, available_at)
		INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) SELECT job_record_id, available_at FROM ins`); err != nil {
		t.Fatal(err)
	}
	refs := cycle(8)

	ids, claims := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		ids[i], claims[i] = r.JobID.String(), r.ClaimID.String()
	}
	arrays := fmt.Sprintf("'{%s}'::uuid[], '{%s}'::uuid[], '%s'", strings.Join(ids, ","), strings.Join(claims, ","), owner)
	for _, s := range []struct {
		name, sql, args string
	}{
		{"claim", lease.ClaimSQL, "8, '" + owner + "', 60000000"},
		{"renew", lease.RenewSQL, arrays + ", 60000000"},
		{"succeed", lease.SucceedSQL, arrays},
	} {
		name, generic, custom := preparedPlans(t, conn, s.sql)
		if custom != 0 || generic != 2 {
			t.Errorf("%s: %d generic and %d custom plans, want 2 generic runs of the one plan and no custom plan", s.name, generic, custom)
		}
		nodes, maxRows := explainExecute(t, conn, name, s.args)
		for _, n := range nodes {
			for _, bad := range []string{"Seq Scan", "Bitmap", "Hash Join", "Merge Join", "Sort"} {
				if strings.HasPrefix(n, bad) {
					t.Errorf("%s on 100,000 jobs: plan has %q: %v", s.name, n, nodes)
				}
			}
		}
		// The claim reads 8 queue entries and their 8 job rows; the others
		// read the 8 presented rows (the batch, whatever the table size).
		if maxRows > 8 {
			t.Errorf("%s on 100,000 jobs: a node over a job table produced %v rows, want at most 8: %v", s.name, maxRows, nodes)
		}
	}
}
