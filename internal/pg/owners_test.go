package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// An owner's pending count covers its PENDING and RUNNING jobs of the claim
// queue and its non-terminal large jobs, nobody else's, bounded by the
// limit; a finished job leaves it.
func TestCountOwnerPendingJobs(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	alice, bob := pgtest.SHA("alice"), pgtest.SHA("bob")
	pgtest.InsertN(t, pool, 3, pg.NewJob{PrincipalScopeHash: alice})
	pgtest.InsertN(t, pool, 2, pg.NewJob{PrincipalScopeHash: bob})
	count := func(owner string, limit int64) int64 {
		t.Helper()
		n, err := pg.CountOwnerPendingJobs(ctx, pool, owner, limit)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, b := count(alice, 10), count(bob, 10); a != 3 || b != 2 {
		t.Fatalf("pending alice %d bob %d, want 3 and 2", a, b)
	}
	if n := count(alice, 2); n != 2 {
		t.Fatalf("bounded count %d, want the limit 2", n)
	}
	if n := count(alice, 0); n != 0 {
		t.Fatalf("limit 0 counted %d", n)
	}
	// Large jobs count while not terminal.
	pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Owner: alice})
	pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Owner: alice, Status: pg.StatusSucceeded})
	if n := count(alice, 10); n != 4 {
		t.Fatalf("with a pending large job %d, want 4", n)
	}
	// RUNNING still counts; a finished job does not.
	res, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: "owners-test-worker", Limit: 10, LeaseDuration: time.Minute})
	if err != nil || len(res.Claimed) != 5 {
		t.Fatalf("claim: %d jobs, %v", len(res.Claimed), err)
	}
	if n := count(alice, 10); n != 4 {
		t.Fatalf("while running %d, want 4", n)
	}
	for _, c := range res.Claimed {
		if _, err := pgtest.SucceedOne(ctx, pool, c.Ref); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := count(alice, 10), count(bob, 10); a != 1 || b != 0 {
		t.Fatalf("after success alice %d (the large job) bob %d, want 1 and 0", a, b)
	}
	if _, err := pg.CountOwnerPendingJobs(ctx, pool, "not-hex", 1); err == nil {
		t.Fatal("a malformed scope hash was counted")
	}
}

// The count reads the owner's prefix of etl_job_claim_queue_owner_index,
// at most limit entries, whatever other owners and the owner itself have
// queued.
func TestCountOwnerPendingJobsReadsTheOwnerIndex(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	heavy, light := pgtest.SHA("heavy"), pgtest.SHA("light")
	pgtest.InsertN(t, pool, 20000, pg.NewJob{PrincipalScopeHash: heavy})
	pgtest.InsertN(t, pool, 5, pg.NewJob{PrincipalScopeHash: light})
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE etl_job_claim_queue`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		owner string
		limit int64
		rows  float64
	}{{heavy, 101, 101}, {light, 101, 5}} {
		slot, _ := pg.OwnerSlot(c.owner)
		var out []byte
		if err := pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+pg.CountOwnerPendingSQL, slot, c.owner, c.limit).Scan(&out); err != nil {
			t.Fatal(err)
		}
		var queue []pgtest.PlanNode
		for _, n := range pgtest.PlanNodes(t, out) {
			if n.RelationName == "etl_job_claim_queue" {
				queue = append(queue, n)
			}
		}
		if len(queue) != 1 || queue[0].IndexName != "etl_job_claim_queue_owner_index" ||
			(queue[0].NodeType != "Index Only Scan" && queue[0].NodeType != "Index Scan") {
			t.Fatalf("owner %s: claim queue read by %+v, want one scan of etl_job_claim_queue_owner_index", c.owner[:8], queue)
		}
		if queue[0].ActualRows > c.rows {
			t.Fatalf("owner %s: the index scan read %v rows, want at most %v", c.owner[:8], queue[0].ActualRows, c.rows)
		}
	}
}

// Weights from configuration: a listed owner gets its weight (a row of its
// own, not due, when it had none), an unlisted owner's weight goes back to
// 1, an unchanged weight is not rewritten, and the claim schedule of an
// existing row is kept.
func TestSetOwnerWeights(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	alice, bob, carol := pgtest.SHA("alice"), pgtest.SHA("bob"), pgtest.SHA("carol")
	pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: alice}) // alice has a due row
	type row struct {
		weight   int
		infinite bool
	}
	read := func(owner string) (row, bool) {
		t.Helper()
		slot, _ := pg.OwnerSlot(owner)
		var r row
		err := pool.QueryRow(ctx, `SELECT weight, due_at = 'infinity' FROM etl_claim_owners WHERE owner_slot = $1`, slot).Scan(&r.weight, &r.infinite)
		if pg.IsNoRows(err) {
			return row{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return r, true
	}
	set, reset, err := pg.SetOwnerWeights(ctx, pool, []pg.OwnerWeight{{alice, 5}, {bob, 1000}})
	if err != nil || set != 2 || reset != 0 {
		t.Fatalf("set %d reset %d, %v; want 2, 0", set, reset, err)
	}
	if r, ok := read(alice); !ok || r.weight != 5 || r.infinite {
		t.Fatalf("alice %+v %v: want weight 5 and her due time kept", r, ok)
	}
	if r, ok := read(bob); !ok || r.weight != 1000 || !r.infinite {
		t.Fatalf("bob %+v %v: want weight 1000, not due (infinity)", r, ok)
	}
	// bob's first job makes him due; his weight stays.
	pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: bob})
	if r, _ := read(bob); r.weight != 1000 || r.infinite {
		t.Fatalf("bob after a job %+v: want weight 1000 and due", r)
	}
	// Same weights again: nothing written.
	if set, reset, err := pg.SetOwnerWeights(ctx, pool, []pg.OwnerWeight{{alice, 5}, {bob, 1000}}); err != nil || set != 0 || reset != 0 {
		t.Fatalf("unchanged: set %d reset %d, %v", set, reset, err)
	}
	// bob leaves the file, carol comes in: bob back to 1.
	if set, reset, err := pg.SetOwnerWeights(ctx, pool, []pg.OwnerWeight{{alice, 5}, {carol, 2}}); err != nil || set != 1 || reset != 1 {
		t.Fatalf("set %d reset %d, %v; want 1, 1", set, reset, err)
	}
	if r, _ := read(bob); r.weight != 1 {
		t.Fatalf("bob removed from the file has weight %d, want 1", r.weight)
	}
	if r, _ := read(carol); r.weight != 2 {
		t.Fatalf("carol weight %d, want 2", r.weight)
	}
	// Empty list: every weight back to 1.
	if set, reset, err := pg.SetOwnerWeights(ctx, pool, nil); err != nil || set != 0 || reset != 2 {
		t.Fatalf("empty: set %d reset %d, %v; want 0, 2", set, reset, err)
	}
	for _, w := range []pg.OwnerWeight{{alice, 0}, {alice, 1001}, {"nope", 2}} {
		if _, _, err := pg.SetOwnerWeights(ctx, pool, []pg.OwnerWeight{w}); err == nil {
			t.Fatalf("%+v accepted", w)
		}
	}
}
