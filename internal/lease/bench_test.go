package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// BenchmarkClaimAndFinish measures the queue's own throughput: claim a batch
// of 100 zero-work jobs in one statement, then finish all of them in one
// transaction (fenced success and its outbox rows, nothing else), over a
// backlog kept at about 10,000 PENDING jobs.
//
//	go test -run='^$' -bench=ClaimAndFinish -benchtime=20x ./internal/lease/
func BenchmarkClaimAndFinish(b *testing.B) {
	const (
		backlog = 10_000
		batch   = 100
		owner   = "bench-worker-01"
	)
	pool, _ := pgtest.NewDatabase(b, pgtest.Options{MaxConns: 4})
	ctx := context.Background()
	pgtest.InsertN(b, pool, backlog, diagnosticJob(3))
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) etl_job_records`); err != nil {
		b.Fatal(err)
	}
	pending, jobs := backlog, 0
	refs := make([]lease.Ref, 0, batch)
	for b.Loop() {
		if pending < batch {
			b.StopTimer()
			pgtest.InsertN(b, pool, backlog-pending, diagnosticJob(3))
			pending = backlog
			b.StartTimer()
		}
		res, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: owner, Limit: batch, LeaseDuration: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Claimed) != batch {
			b.Fatalf("claimed %d of a backlog of %d, want %d", len(res.Claimed), pending, batch)
		}
		refs = refs[:0]
		for _, c := range res.Claimed {
			refs = append(refs, c.Ref)
		}
		var won int
		if err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
			w, err := lease.Succeed(ctx, tx, owner, refs)
			won = len(w)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		if won != len(refs) {
			b.Fatalf("%d of %d live leases succeeded", won, len(refs))
		}
		pending -= won
		jobs += won
	}
	b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
}

// scaleFill inserts n PENDING diagnostic jobs in one INSERT ... SELECT
// generate_series statement, eligible in insertion order, then vacuums and
// analyses the table so the benchmark starts from a steady state. Job ids and
// submission keys count up (valid formats, append-only index inserts): that
// halves the fill time of random keys and does not change what a claim reads.
func scaleFill(b *testing.B, pool *pgxpool.Pool, n int) {
	b.Helper()
	ctx := context.Background()
	const payload = `{"durationMillis":0,"records":[]}`
	start := time.Now()
	_, err := pool.Exec(ctx, `
INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
                             request_digest, request_payload, max_attempts, available_at)
SELECT lpad(to_hex(g), 32, '0')::uuid, 'diagnostic', decode($1, 'hex'), decode(lpad(to_hex(g), 64, '0'), 'hex'),
       decode($2, 'hex'), $3, 3, clock_timestamp() - interval '1 day' + g * interval '1 microsecond'
FROM generate_series(1, $4::int) AS g`, pgtest.SHA("bench-owner"), pgtest.SHA(payload), payload, n)
	if err != nil {
		b.Fatalf("fill %d jobs: %v", n, err)
	}
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) etl_job_records`); err != nil {
		b.Fatal(err)
	}
	// Flush the fill's dirty pages now rather than in a checkpoint that
	// would land inside the measurement (needs pg_checkpoint or superuser).
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		b.Logf("checkpoint after fill skipped: %v", err)
	}
	b.Logf("filled %d PENDING jobs in %v", n, time.Since(start).Round(time.Millisecond))
}

// BenchmarkClaimAtScale measures the latency of claiming 10 jobs (and
// releasing them again, so the backlog stays constant) against a table of
// 10k and of 1M PENDING jobs. The claim reads O(batch) entries of the partial
// claim-eligibility index, so the two should be close. The 1M table is built
// only when -bench selects it, and never under -short.
//
//	go test -run='^$' -bench=ClaimAtScale -benchtime=2000x ./internal/lease/
func BenchmarkClaimAtScale(b *testing.B) {
	for _, sc := range []struct {
		name string
		rows int
	}{
		{"pending=10k", 10_000},
		{"pending=1M", 1_000_000},
	} {
		b.Run(sc.name, func(b *testing.B) {
			if sc.rows >= 1_000_000 && testing.Short() {
				b.Skip("1M-row backlog skipped under -short")
			}
			const (
				batch = 10
				owner = "bench-scale-01"
			)
			pool, _ := pgtest.NewDatabase(b, pgtest.Options{MaxConns: 4})
			ctx := context.Background()
			scaleFill(b, pool, sc.rows)
			var claiming time.Duration
			for b.Loop() {
				start := time.Now()
				res, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: owner, Limit: batch, LeaseDuration: time.Minute})
				claiming += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Claimed) != batch {
					b.Fatalf("claimed %d, want %d", len(res.Claimed), batch)
				}
				for _, c := range res.Claimed {
					if err := lease.Release(ctx, pool, c.Ref); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(claiming.Nanoseconds())/float64(b.N), "claim-ns/op")
			var pending int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records WHERE job_status = 'PENDING'`).Scan(&pending); err != nil {
				b.Fatal(err)
			}
			if pending != sc.rows {
				b.Fatalf("backlog drifted to %d, want %d", pending, sc.rows)
			}
		})
	}
}
