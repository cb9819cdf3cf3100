package pg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// testBackfill fills bf_t.b (as a release that added the column would)
// with a*2 and counts in done_count how often a row was done.
var testBackfill = pg.Backfill{
	Name:        "bf_test_double_a",
	Description: "bf_t.b = a*2 for rows written before b existed",
	Remaining:   `SELECT count(*) FROM bf_t WHERE b IS NULL`,
	Batch: `WITH todo AS (
    SELECT id FROM bf_t WHERE b IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
)
UPDATE bf_t t SET b = t.a * 2, done_count = t.done_count + 1 FROM todo WHERE t.id = todo.id`,
}

// backfillDB returns a fresh database with bf_t holding rows rows to do.
func backfillDB(t *testing.T, rows int) (*pgxpool.Pool, string) {
	t.Helper()
	pool, url := pgtest.NewDatabase(t, pgtest.Options{Empty: true, MaxConns: 4})
	_, err := pool.Exec(context.Background(), `
CREATE TABLE bf_t (id bigserial PRIMARY KEY, a int NOT NULL, b int,
    done_count int NOT NULL DEFAULT 0, writes int NOT NULL DEFAULT 0);
INSERT INTO bf_t (a) SELECT g FROM generate_series(1, `+fmt.Sprint(rows)+`) g`)
	if err != nil {
		t.Fatal(err)
	}
	return pool, url
}

// assertBackfilled fails t unless every row of bf_t is done exactly once.
func assertBackfilled(t *testing.T, pool *pgxpool.Pool, wantRows int64) {
	t.Helper()
	var rows, wrong int64
	err := pool.QueryRow(context.Background(), `SELECT count(*),
		count(*) FILTER (WHERE b IS DISTINCT FROM a * 2 OR done_count <> 1) FROM bf_t`).Scan(&rows, &wrong)
	if err != nil {
		t.Fatal(err)
	}
	if rows != wantRows || wrong != 0 {
		t.Fatalf("bf_t: %d rows (want %d), %d not done exactly once", rows, wantRows, wrong)
	}
}

func doneRows(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM bf_t WHERE b IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A backfill interrupted at a batch boundary, and again while a batch is in
// flight (that batch still commits), then run again, does every row exactly
// once, while writers insert rows still to do (as binaries of the previous
// release would) and update rows, none of them failing.
func TestBackfillInterruptRerunWithWriters(t *testing.T) {
	t.Parallel()
	const initial, batch = 600, 50
	pool, url := backfillDB(t, initial)
	ctx := context.Background()

	writers, err := pg.NewPool(ctx, url, pg.PoolOptions{MaxConns: 2, LockTimeout: 30 * time.Second, ApplicationName: "bf-writer"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(writers.Close)
	var inserted, updated atomic.Int64
	var writeErrs []error
	var errMu sync.Mutex
	stopWriters := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stopWriters:
					return
				default:
				}
				var err error
				if i%2 == 0 {
					_, err = writers.Exec(ctx, `INSERT INTO bf_t (a) VALUES ($1)`, 100000+w*100000+i)
					if err == nil {
						inserted.Add(1)
					}
				} else {
					_, err = writers.Exec(ctx, `UPDATE bf_t SET writes = writes + 1 WHERE id = $1`, 1+(i*7+w)%initial)
					if err == nil {
						updated.Add(1)
					}
				}
				if err != nil {
					errMu.Lock()
					writeErrs = append(writeErrs, err)
					errMu.Unlock()
					return
				}
			}
		})
	}
	stopped := sync.OnceFunc(func() { close(stopWriters); wg.Wait() })
	t.Cleanup(stopped)
	testwait.For(t, 2*time.Minute, "writers under way", func() bool { return inserted.Load() >= 5 && updated.Load() >= 5 })

	opts := pg.BackfillOptions{BatchSize: batch, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}

	// Run 1: stopped at the boundary after batch 3.
	ctx1, cancel1 := context.WithCancel(ctx)
	o1 := opts
	o1.OnBatch = func(p pg.BackfillProgress) {
		if p.Batch == 3 {
			cancel1()
		}
	}
	res, err := pg.RunBackfill(ctx1, pool, testBackfill, o1)
	cancel1()
	if err != nil || !res.Stopped || res.Done != 3*batch || res.Remaining == 0 {
		t.Fatalf("run 1: %+v, %v; want stopped after 3 batches of %d", res, err, batch)
	}
	if n := doneRows(t, pool); n != 3*batch {
		t.Fatalf("after run 1: %d rows done, want %d", n, 3*batch)
	}

	// Run 2: stopped while batch 2 is in flight: it still completes.
	ctx2, cancel2 := context.WithCancel(ctx)
	o2 := opts
	o2.OnBatchStart = func(b int) {
		if b == 2 {
			cancel2()
		}
	}
	res, err = pg.RunBackfill(ctx2, pool, testBackfill, o2)
	cancel2()
	if err != nil || !res.Stopped || res.Done != 2*batch {
		t.Fatalf("run 2: %+v, %v; want stopped after 2 batches of %d", res, err, batch)
	}
	if n := doneRows(t, pool); n != 5*batch {
		t.Fatalf("after run 2: %d rows done, want %d", n, 5*batch)
	}

	// Run 3: the writers stop after its second batch; it completes.
	o3 := opts
	o3.OnBatchStart = func(b int) {
		if b == 3 {
			stopped()
		}
	}
	res, err = pg.RunBackfill(ctx, pool, testBackfill, o3)
	if err != nil || res.Stopped || res.Remaining != 0 {
		t.Fatalf("run 3: %+v, %v; want complete", res, err)
	}
	stopped()
	if len(writeErrs) > 0 {
		t.Fatalf("writers failed during the backfill: %v", writeErrs)
	}
	assertBackfilled(t, pool, initial+inserted.Load())
	var writes int64
	if err := pool.QueryRow(ctx, `SELECT sum(writes) FROM bf_t`).Scan(&writes); err != nil || writes != updated.Load() {
		t.Fatalf("writers' updates: %d in the table (%v), %d made", writes, err, updated.Load())
	}
	// And a run with nothing left is a no-op that ends complete.
	res, err = pg.RunBackfill(ctx, pool, testBackfill, opts)
	if err != nil || res.Done != 0 || res.Remaining != 0 || res.Stopped {
		t.Fatalf("run with nothing left: %+v, %v", res, err)
	}
}

// A batch that times out on a table lock (SQLSTATE 55P03) is rolled back
// and retried until the lock is released; every row is done once.
func TestBackfillRetriesLockTimeout(t *testing.T) {
	t.Parallel()
	pool, _ := backfillDB(t, 120)
	release := holdLock(t, pool, "LOCK TABLE bf_t IN SHARE MODE") // blocks the UPDATE's ROW EXCLUSIVE
	var mu sync.Mutex
	var states []string
	first := make(chan struct{})
	o := pg.BackfillOptions{BatchSize: 50, LockTimeout: 50 * time.Millisecond, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond,
		OnRetry: func(_ int, state string) {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, state)
			if len(states) == 1 {
				close(first)
			}
		}}
	type outcome struct {
		res pg.BackfillResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := pg.RunBackfill(context.Background(), pool, testBackfill, o)
		done <- outcome{res, err}
	}()
	select {
	case <-first:
	case out := <-done:
		t.Fatalf("backfill ended before any retry: %+v, %v", out.res, out.err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no retry within 2 minutes")
	}
	if n := doneRows(t, pool); n != 0 {
		t.Fatalf("%d rows done while the table was locked", n)
	}
	release()
	out := <-done
	if out.err != nil || out.res.Remaining != 0 || out.res.Done != 120 {
		t.Fatalf("after the lock was released: %+v, %v", out.res, out.err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range states {
		if s != "55P03" {
			t.Errorf("retry after SQLSTATE %s, want 55P03", s)
		}
	}
	assertBackfilled(t, pool, 120)
}

// Rows that remain but are all locked by another transaction past the
// retry budget end the run with ErrBackfillStuck and the count; the rows
// other batches could take are done.
func TestBackfillStuckOnLockedRows(t *testing.T) {
	t.Parallel()
	pool, _ := backfillDB(t, 30)
	holdLock(t, pool, "SELECT id FROM bf_t WHERE id > 20 FOR UPDATE")
	o := pg.BackfillOptions{BatchSize: 8, RetryFor: 200 * time.Millisecond, RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond}
	res, err := pg.RunBackfill(context.Background(), pool, testBackfill, o)
	if !errors.Is(err, pg.ErrBackfillStuck) || res.Remaining != 10 || res.Done != 20 {
		t.Fatalf("with 10 rows locked: %+v, %v; want ErrBackfillStuck, 20 done, 10 remaining", res, err)
	}
	if !strings.Contains(err.Error(), "bf_test_double_a") {
		t.Errorf("error %q does not name the backfill", err)
	}
}

// The registry refuses bad names, missing statements and duplicates, and
// lists by name.
func TestBackfillRegistry(t *testing.T) {
	var r pg.BackfillRegistry
	b := testBackfill
	if err := r.Register(b); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(b); err == nil {
		t.Error("registered the same name twice")
	}
	for _, bad := range []pg.Backfill{
		{Name: "Bad-Name", Description: "d", Remaining: "q", Batch: "s"},
		{Name: "no_batch", Description: "d", Remaining: "q"},
		{Name: "no_remaining", Description: "d", Batch: "s"},
		{Name: "no_description", Remaining: "q", Batch: "s"},
	} {
		if err := r.Register(bad); err == nil {
			t.Errorf("registered %+v", bad)
		}
	}
	a := b
	a.Name = "a_first"
	if err := r.Register(a); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range r.List() {
		names = append(names, x.Name)
	}
	if strings.Join(names, ",") != "a_first,bf_test_double_a" {
		t.Fatalf("List: %v", names)
	}
	if got, ok := r.Get("a_first"); !ok || got.Batch != b.Batch {
		t.Fatalf("Get: %+v %v", got, ok)
	}
	if _, ok := r.Get("missing"); ok {
		t.Fatal("Get found a missing name")
	}
}
