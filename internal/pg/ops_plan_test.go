package pg_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// seedOpsJobs inserts n jobs shaped like a busy system's history: 1% PENDING
// (with payload and claim-queue row), 20 RUNNING under two lease owners,
// 0.1% FAILED, the rest SUCCEEDED; ids are UUIDv7-shaped, one per
// millisecond, ending now. Then it analyzes the tables.
func seedOpsJobs(t testing.TB, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := context.Background()
	const seed = `
WITH g AS (
    SELECT i, (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $1 + i AS ms, md5(i::text) AS h
    FROM generate_series(1, $1) i
), r AS (
    SELECT i, h, lpad(to_hex(ms), 12, '0') AS hx, to_timestamp(ms / 1000.0) AS at,
           CASE WHEN i % 100 = 0 THEN 'PENDING'
                WHEN i % 1000 = 1 THEN 'FAILED'
                WHEN i > $1 - 20 THEN 'RUNNING'
                ELSE 'SUCCEEDED' END AS st
    FROM g
)
INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash, request_digest,
    request_payload, job_status, attempt_count, max_attempts, available_at, lease_claim_id, lease_owner_id,
    lease_expires_at, lease_fencing_token, failure_code, created_at, updated_at)
SELECT (substr(hx, 1, 8) || '-' || substr(hx, 9, 4) || '-7' || substr(h, 1, 3) || '-8' || substr(h, 4, 3) || '-' || substr(h, 7, 12))::uuid,
       'etl_records', decode(md5((i % 7)::text) || md5((i % 7)::text), 'hex'), decode(h || md5(h), 'hex'), decode(h || h, 'hex'),
       CASE WHEN st IN ('PENDING', 'RUNNING') THEN '[{"id":"a"},{"id":"b"}]' END,
       st, CASE WHEN st = 'PENDING' THEN 0 ELSE 1 END, 3, at,
       CASE WHEN st = 'RUNNING' THEN gen_random_uuid() END,
       CASE WHEN st = 'RUNNING' THEN 'bench-worker-' || (i % 2) END,
       CASE WHEN st = 'RUNNING' THEN clock_timestamp() + interval '30 seconds' END,
       CASE WHEN st = 'RUNNING' THEN i END,
       CASE WHEN st = 'FAILED' THEN 'etl_invalid_record' END,
       at, at
FROM r`
	if _, err := pool.Exec(ctx, seed, n); err != nil {
		t.Fatalf("seed jobs: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO etl_job_claim_queue (job_record_id, claimable_at)
SELECT job_record_id, COALESCE(lease_expires_at, available_at) FROM etl_job_records WHERE job_status IN ('PENDING', 'RUNNING')`); err != nil {
		t.Fatalf("seed queue: %v", err)
	}
	for _, table := range []string{"etl_job_records", "etl_job_claim_queue"} {
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
			t.Fatalf("analyze: %v", err)
		}
	}
}

// explain runs EXPLAIN ANALYZE of sql and returns, for etl_job_records, the
// node types used and the most rows any of its nodes produced.
func explain(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) (nodes []string, maxRows float64) {
	t.Helper()
	var out []byte
	if err := pool.QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&out); err != nil {
		t.Fatalf("explain: %v", err)
	}
	for _, n := range pgtest.PlanNodes(t, out) {
		if n.RelationName == "etl_job_records" {
			nodes = append(nodes, n.NodeType+" "+n.IndexName)
			maxRows = max(maxRows, n.ActualRows*max(1, n.ActualLoops))
		}
	}
	return nodes, maxRows
}

// TestOpsQueriesAreBoundedOnALargeTable pins, by EXPLAIN ANALYZE on 200,000
// jobs, that no console query scans the job table sequentially and that each
// reads at most its bound of job rows (scan limit, active cap), whatever
// the table size. The row counts are exact, so the test is deterministic.
func TestOpsQueriesAreBoundedOnALargeTable(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	const n = 200000
	seedOpsJobs(t, pool, n)
	ctx := context.Background()
	var someID uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT job_record_id FROM etl_job_records WHERE job_status = 'RUNNING' LIMIT 1`).Scan(&someID); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cases := []struct {
		name  string
		sql   string
		args  []any
		bound float64
	}{
		{"list newest", pg.OpsListSQL, pg.OpsListArgs(pg.OpsListParams{Limit: 50}), 5000},
		{"list FAILED (sparse)", pg.OpsListSQL, pg.OpsListArgs(pg.OpsListParams{Limit: 50, Status: "FAILED"}), 5000},
		{"list by code and time", pg.OpsListSQL, pg.OpsListArgs(pg.OpsListParams{Limit: 50, FailureCode: "etl_invalid_record", From: now.Add(-time.Minute), To: now}), 5000},
		// The body of etl_ops_active_jobs (migration 00010): a SECURITY
		// DEFINER function's plan is not shown by EXPLAIN of its call.
		{"active set", `SELECT j.job_record_id FROM (SELECT q0.job_record_id, q0.claimable_at FROM etl_job_claim_queue q0
      ORDER BY q0.claimable_at, q0.job_record_id LIMIT $1) q
JOIN etl_job_records j ON j.job_record_id = q.job_record_id
WHERE j.job_status IN ('PENDING', 'RUNNING')`, []any{pg.OpsActiveCap + 1}, pg.OpsActiveCap + 1},
		{"detail", pg.OpsDetailSQL, []any{someID}, 1},
		{"children", pg.OpsChildrenSQL, []any{someID}, 20},
		{"recent outcomes", pg.RecentOutcomesSQL, []any{pg.UUIDV7Floor(now.Add(-time.Hour)), 20000, now.Add(-time.Hour)}, 20000},
	}
	for _, c := range cases {
		nodes, rows := explain(t, pool, c.sql, c.args...)
		for _, node := range nodes {
			if node == "Seq Scan " {
				t.Errorf("%s: sequential scan of etl_job_records (%v)", c.name, nodes)
			}
		}
		if rows > c.bound {
			t.Errorf("%s: a job-table node produced %.0f rows, bound %.0f (%v)", c.name, rows, c.bound, nodes)
		}
		t.Logf("%s: %v, at most %.0f job rows", c.name, nodes, rows)
	}
}

// BenchmarkConsolePages measures each console page's queries on
// MIGHTYETL_CONSOLE_BENCH_ROWS jobs (default 1,000,000) and reports p50 and
// p99 per page:
//
//	go test -run '^$' -bench BenchmarkConsolePages -benchtime 200x ./internal/pg/
func BenchmarkConsolePages(b *testing.B) {
	rows := 1000000
	if v := os.Getenv("MIGHTYETL_CONSOLE_BENCH_ROWS"); v != "" {
		var err error
		if rows, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	pool, _ := pgtest.NewDatabase(b)
	seedOpsJobs(b, pool, rows)
	ctx := context.Background()
	var runningID uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT job_record_id FROM etl_job_records WHERE job_status = 'RUNNING' LIMIT 1`).Scan(&runningID); err != nil {
		b.Fatal(err)
	}
	pages := []struct {
		name string
		run  func() error
	}{
		{"overview", func() error {
			if _, _, _, err := pg.OpsActiveJobs(ctx, pool); err != nil {
				return err
			}
			if _, _, err := pg.OpsRecentOutcomes(ctx, pool, time.Now().Add(-time.Hour), 20000); err != nil {
				return err
			}
			if _, err := pg.ReadOutboxBacklog(ctx, pool, 100000); err != nil {
				return err
			}
			_, err := pg.ReadOpsCounters(ctx, pool)
			return err
		}},
		{"jobs", func() error { _, err := pg.OpsListJobs(ctx, pool, pg.OpsListParams{Limit: 50}); return err }},
		{"jobs_failed", func() error {
			_, err := pg.OpsListJobs(ctx, pool, pg.OpsListParams{Limit: 50, Status: "FAILED"})
			return err
		}},
		{"jobs_pending", func() error {
			_, err := pg.OpsListJobs(ctx, pool, pg.OpsListParams{Limit: 50, Status: "PENDING"})
			return err
		}},
		{"job_detail", func() error { _, err := pg.OpsJobDetail(ctx, pool, runningID); return err }},
		{"workers", func() error { _, _, _, err := pg.OpsActiveJobs(ctx, pool); return err }},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			var d []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := p.run(); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
			}
			sort.Slice(d, func(i, k int) bool { return d[i] < d[k] })
			pct := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			fmt.Fprintf(os.Stderr, "console page %s at %d jobs: p50 %.2f ms, p99 %.2f ms (%d runs)\n", p.name, rows, pct(0.5), pct(0.99), len(d))
		})
	}
}
