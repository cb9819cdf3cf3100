package pg_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// claimableAt reads job id's claim-queue time.
func claimableAt(t *testing.T, db pg.DBTX, id uuid.UUID) time.Time {
	t.Helper()
	var at time.Time
	if err := db.QueryRow(context.Background(), `SELECT claimable_at FROM etl_job_claim_queue WHERE job_record_id = $1`, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// The overview's claimable jobs by owner and priority on a few owners:
// exact counts of claimable jobs only (a scheduled job, a live lease and
// another owner's are not counted), the owners by count, each owner's
// oldest claimable time by the database clock, the rows without an owner
// slot, and the owners' weights and claim states.
func TestOpsClaimableByOwner(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	alice, bob, carol, dave := pgtest.SHA("alice"), pgtest.SHA("bob"), pgtest.SHA("carol"), pgtest.SHA("dave")

	// Carol's two jobs run (live leases): not claimable.
	pgtest.InsertN(t, pool, 2, pg.NewJob{PrincipalScopeHash: carol})
	if res, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: "owners-test", Limit: 10, LeaseDuration: time.Hour}); err != nil || len(res.Claimed) != 2 {
		t.Fatalf("claim carol's jobs: %d, %v", len(res.Claimed), err)
	}
	// Alice: three of priority 1 claimable for a minute, two of priority
	// 4 for 10 s, one of priority 2 scheduled an hour ahead.
	a1 := pgtest.InsertN(t, pool, 3, pg.NewJob{PrincipalScopeHash: alice, Priority: 1})
	a4 := pgtest.InsertN(t, pool, 2, pg.NewJob{PrincipalScopeHash: alice, Priority: 4})
	pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: alice, NotBefore: dbNow(t, pool).Add(time.Hour)})
	for _, id := range a1 {
		pgtest.MakeAvailable(t, pool, id, time.Minute)
	}
	for _, id := range a4 {
		pgtest.MakeAvailable(t, pool, id, 10*time.Second)
	}
	aliceOldest := claimableAt(t, pool, a1[0])
	// Bob: one of priority 3, weight 5. Dave: one of priority 2, and the
	// claims found him empty three times (idle until an hour from now).
	b3 := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: bob, Priority: 3})
	d2 := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: dave})
	if _, _, err := pg.SetOwnerWeights(ctx, pool, []pg.OwnerWeight{{PrincipalScopeHash: bob, Weight: 5}}); err != nil {
		t.Fatal(err)
	}
	daveSlot, _ := pg.OwnerSlot(dave)
	if _, err := pool.Exec(ctx, `UPDATE etl_claim_owners SET due_at = clock_timestamp() + interval '1 hour', idle_visits = 3
WHERE owner_slot = $1`, daveSlot); err != nil {
		t.Fatal(err)
	}
	// A queue row without an owner slot (queued by a binary below level 3).
	if _, err := pool.Exec(ctx, `INSERT INTO etl_job_claim_queue (job_record_id, claimable_at, owner_slot, priority)
VALUES (gen_random_uuid(), clock_timestamp() - interval '1 second', NULL, 2)`); err != nil {
		t.Fatal(err)
	}

	now := dbNow(t, pool)
	got, err := pg.OpsClaimableByOwner(ctx, pool, pg.OpsOwnersParams{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if got.Estimated || got.Claimable != 8 || got.ByPriority != [4]int64{3, 2, 1, 2} || got.WithoutOwnerSlot != 1 ||
		got.OwnersWithClaimable != 3 {
		t.Fatalf("totals: estimated %v, claimable %d by priority %v, without owner %d, owners %d; want exact, 8, [3 2 1 2], 1, 3",
			got.Estimated, got.Claimable, got.ByPriority, got.WithoutOwnerSlot, got.OwnersWithClaimable)
	}
	var owners []string
	for _, o := range got.Owners {
		owners = append(owners, o.Owner)
	}
	// Alice first (5 jobs), then bob and dave (1 each) by owner slot.
	bobSlot, _ := pg.OwnerSlot(bob)
	wantOwners := []string{alice[:8], bob[:8], dave[:8]}
	if bobSlot > daveSlot {
		wantOwners[1], wantOwners[2] = wantOwners[2], wantOwners[1]
	}
	if !slices.Equal(owners, wantOwners) {
		t.Fatalf("owners %v, want %v (alice, then by slot)", owners, wantOwners)
	}
	byOwner := map[string]pg.OwnerClaimable{}
	for _, o := range got.Owners {
		byOwner[o.Owner] = o
	}
	a, b, d := byOwner[alice[:8]], byOwner[bob[:8]], byOwner[dave[:8]]
	if a.Claimable != 5 || a.ByPriority != [4]int64{3, 0, 0, 2} || a.OldestClaimableAt == nil || !a.OldestClaimableAt.Equal(aliceOldest) {
		t.Fatalf("alice: %d %v oldest %v, want 5 [3 0 0 2] oldest %v", a.Claimable, a.ByPriority, a.OldestClaimableAt, aliceOldest)
	}
	if a.State != pg.OwnerDue || a.Weight != 1 || a.DueAt == nil || a.DueAt.After(now) {
		t.Fatalf("alice's claim state %s weight %d due %v, want due, 1", a.State, a.Weight, a.DueAt)
	}
	if bobAt := claimableAt(t, pool, b3[0]); b.Claimable != 1 || b.ByPriority != [4]int64{0, 0, 1, 0} ||
		b.OldestClaimableAt == nil || !b.OldestClaimableAt.Equal(bobAt) || b.Weight != 5 || b.State != pg.OwnerDue {
		t.Fatalf("bob: %+v, want 1 of priority 3 since %v, weight 5, due", b, bobAt)
	}
	if daveAt := claimableAt(t, pool, d2[0]); d.ByPriority != [4]int64{0, 1, 0, 0} || d.OldestClaimableAt == nil ||
		!d.OldestClaimableAt.Equal(daveAt) || d.State != pg.OwnerIdle || d.IdleVisits != 3 || d.DueAt == nil ||
		d.DueAt.Sub(now) < 59*time.Minute {
		t.Fatalf("dave: %+v, want 1 of priority 2, idle 3 looks, due in an hour", d)
	}
	// The owners the claim knows: alice, bob and carol due, dave idle; bob
	// weighted; the longest-due owner has been due since before now.
	c := got.ClaimOwners
	if c.Owners != 4 || c.Due != 3 || c.Idle != 1 || c.Scheduled != 0 || c.Parked != 0 || c.Weighted != 1 || c.Capped {
		t.Fatalf("claim owners %+v, want 4: 3 due, 1 idle, 1 weighted", c)
	}
	if c.LongestDueAt == nil || c.LongestDueAt.After(now) {
		t.Fatalf("longest due %v, want a due_at before %v", c.LongestDueAt, now)
	}

	// Top bounds the list; OwnersCap bounds the owner count (and says so).
	top, err := pg.OpsClaimableByOwner(ctx, pool, pg.OpsOwnersParams{Now: now, Top: 1, OwnersCap: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Owners) != 1 || top.Owners[0].Owner != alice[:8] || top.OwnersWithClaimable != 3 ||
		!top.ClaimOwners.Capped || top.ClaimOwners.Owners != 3 {
		t.Fatalf("top 1, cap 2: %d owners (%v), with claimable %d, claim owners %+v", len(top.Owners), top.Owners,
			top.OwnersWithClaimable, top.ClaimOwners)
	}
	// Parked and scheduled owners.
	if _, err := pool.Exec(ctx, `UPDATE etl_claim_owners SET due_at = 'infinity', idle_visits = 2 WHERE owner_slot = $1`, daveSlot); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE etl_claim_owners SET due_at = clock_timestamp() + interval '1 hour', idle_visits = 0 WHERE owner_slot = $1`, bobSlot); err != nil {
		t.Fatal(err)
	}
	got, err = pg.OpsClaimableByOwner(ctx, pool, pg.OpsOwnersParams{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range got.Owners {
		switch o.Owner {
		case dave[:8]:
			if o.State != pg.OwnerParked || o.DueAt != nil {
				t.Fatalf("parked dave: %+v", o)
			}
		case bob[:8]:
			if o.State != pg.OwnerScheduled || o.DueAt == nil {
				t.Fatalf("scheduled bob: %+v", o)
			}
		}
	}
	if c := got.ClaimOwners; c.Parked != 1 || c.Scheduled != 1 || c.Due != 2 || c.Idle != 0 {
		t.Fatalf("claim owners after parking dave and scheduling bob: %+v", c)
	}
	if _, err := pg.OpsClaimableByOwner(ctx, pool, pg.OpsOwnersParams{}); err == nil {
		t.Fatal("a read without the database time was accepted")
	}
}

// seedQueue inserts n claim-queue rows (no job rows: the reads here never
// join them) for owner slots 1..owners, row i of owner slot 1 + i % owners,
// priority 1 + i % 4 (or 3 for even slots when oddEven), claimable i
// milliseconds before the database clock, except every tenth row, which is
// an hour ahead; one etl_claim_owners row per slot, due now. Then it
// analyzes both tables.
func seedQueue(t testing.TB, pool *pgxpool.Pool, n, owners int, oddEven bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
INSERT INTO etl_job_claim_queue (job_record_id, claimable_at, owner_slot, priority)
SELECT gen_random_uuid(),
       clock_timestamp() - i * interval '1 millisecond' + CASE WHEN i % 10 = 9 THEN interval '1 hour' ELSE interval '0' END,
       1 + i % $2,
       CASE WHEN $3 THEN CASE WHEN (1 + i % $2) % 2 = 0 THEN 3 ELSE 1 END ELSE 1 + i % 4 END
FROM generate_series(0, $1 - 1) i`, n, owners, oddEven); err != nil {
		t.Fatalf("seed queue: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO etl_claim_owners (owner_slot, due_at)
SELECT s, clock_timestamp() FROM generate_series(1, $1::bigint) s`, owners); err != nil {
		t.Fatalf("seed owners: %v", err)
	}
	for _, table := range []string{"etl_job_claim_queue", "etl_claim_owners"} {
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
			t.Fatalf("analyze: %v", err)
		}
	}
}

// Beyond ExactLimit claimable jobs the counts are estimated from a page
// sample of the queue (flagged, with the sampled share), while the oldest
// claimable times stay exact; at the limit they are exact.
func TestOpsClaimableByOwnerEstimatesBeyondTheExactLimit(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	// 6,000 rows (about 50 pages), two owners on every page: slot 1 (even
	// rows, priority 1) has 3,000 claimable, slot 2 (odd rows, priority 3)
	// 2,400 (its every fifth row is an hour ahead).
	seedQueue(t, pool, 6000, 2, true)
	now := dbNow(t, pool)

	exact, err := pg.OpsClaimableByOwner(ctx, pool, pg.OpsOwnersParams{Now: now, ExactLimit: 5400})
	if err != nil {
		t.Fatal(err)
	}
	if exact.Estimated || exact.Claimable != 5400 || exact.ByPriority != [4]int64{3000, 0, 2400, 0} || len(exact.Owners) != 2 {
		t.Fatalf("at the exact limit: estimated %v, %d claimable %v, %d owners; want exact 5400 [3000 0 2400 0], 2",
			exact.Estimated, exact.Claimable, exact.ByPriority, len(exact.Owners))
	}

	// A quarter of the pages or so: each owner is on every page, so the
	// chance that the sample misses one is that of reading no page at all
	// (about 0.72^50, 1e-7).
	est, err := pg.OpsClaimableByOwner(ctx, pool, pg.OpsOwnersParams{Now: now, ExactLimit: 5399, SamplePages: 14})
	if err != nil {
		t.Fatal(err)
	}
	if !est.Estimated || est.SampledPercent <= 0 || est.SampledPercent >= 100 || est.ExactLimit != 5399 {
		t.Fatalf("beyond the exact limit: estimated %v, sampled %v%%", est.Estimated, est.SampledPercent)
	}
	if est.ByPriority[1] != 0 || est.ByPriority[3] != 0 || est.ByPriority[0]+est.ByPriority[2] != est.Claimable || est.WithoutOwnerSlot != 0 {
		t.Fatalf("estimated totals %d by priority %v", est.Claimable, est.ByPriority)
	}
	if len(est.Owners) != 2 {
		t.Fatalf("the sample shows %d owners, want both", len(est.Owners))
	}
	for _, o := range est.Owners {
		want := exact.Owners[slices.IndexFunc(exact.Owners, func(e pg.OwnerClaimable) bool { return e.Slot == o.Slot })]
		if o.Claimable != o.ByPriority[0]+o.ByPriority[2] || (o.Slot == 1) != (o.ByPriority[2] == 0) {
			t.Fatalf("estimated owner %d: %d by priority %v", o.Slot, o.Claimable, o.ByPriority)
		}
		// Exact whichever way the counts were made.
		if o.OldestClaimableAt == nil || !o.OldestClaimableAt.Equal(*want.OldestClaimableAt) || o.State != pg.OwnerDue {
			t.Fatalf("estimated owner %d: oldest %v state %s, want %v due", o.Slot, o.OldestClaimableAt, o.State, want.OldestClaimableAt)
		}
	}
}

// queueNodes runs EXPLAIN ANALYZE of sql and returns the plan nodes that
// read table: their types with index, and the most rows one produced
// (over all loops) and per loop.
func queueNodes(t *testing.T, pool *pgxpool.Pool, table, sql string, args ...any) (nodes []string, maxRows, maxPerLoop float64) {
	t.Helper()
	var out []byte
	if err := pool.QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&out); err != nil {
		t.Fatalf("explain: %v", err)
	}
	for _, n := range pgtest.PlanNodes(t, out) {
		if n.RelationName == table {
			nodes = append(nodes, n.NodeType+" "+n.IndexName)
			maxRows = max(maxRows, n.ActualRows*max(1, n.ActualLoops))
			maxPerLoop = max(maxPerLoop, n.ActualRows)
		}
	}
	return nodes, maxRows, maxPerLoop
}

// TestOpsClaimableByOwnerIsBounded pins the plans of the overview's owner
// reads on 100,000 queued rows over 1,000 owners by EXPLAIN ANALYZE: the
// exact pass counts on the eligibility index alone and reads rows through
// it, each stopping at its limit, the
// estimate reads a page sample, the shown owners' oldest times are one
// index-only descent per owner and priority, and the claim owners' counts
// stop at their cap. The row counts are exact, so the test is
// deterministic.
func TestOpsClaimableByOwnerIsBounded(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	seedQueue(t, pool, 100000, 1000, false)
	now := dbNow(t, pool)
	const queue = "etl_job_claim_queue"

	nodes, rows, _ := queueNodes(t, pool, queue, pg.OpsClaimableCountSQL, now, pg.OpsOwnersExactLimit+1)
	if !slices.Equal(nodes, []string{"Index Only Scan etl_job_claim_queue_eligibility_index"}) || rows > pg.OpsOwnersExactLimit+1 {
		t.Errorf("exact count: %v, %.0f rows; want the eligibility index alone, at most %d rows", nodes, rows, pg.OpsOwnersExactLimit+1)
	}
	t.Logf("exact count: %v, %.0f rows", nodes, rows)

	nodes, rows, _ = queueNodes(t, pool, queue, pg.OpsClaimableHeadSQL, now, pg.OpsOwnersExactLimit+1)
	if !slices.Equal(nodes, []string{"Index Scan etl_job_claim_queue_eligibility_index"}) || rows > pg.OpsOwnersExactLimit+1 {
		t.Errorf("exact pass: %v, %.0f rows; want the eligibility index, at most %d rows", nodes, rows, pg.OpsOwnersExactLimit+1)
	}
	t.Logf("exact pass: %v, %.0f rows", nodes, rows)

	nodes, rows, _ = queueNodes(t, pool, queue, pg.OpsClaimableSampleSQL, now, float32(10))
	if !slices.Equal(nodes, []string{"Sample Scan "}) {
		t.Errorf("estimate: %v; want a sample scan", nodes)
	}
	t.Logf("estimate (10%% of pages): %v, %.0f rows", nodes, rows)

	slots := make([]int64, pg.OpsOwnersTop)
	for i := range slots {
		slots[i] = int64(i + 1)
	}
	nodes, rows, perLoop := queueNodes(t, pool, queue, pg.OpsOwnerDetailSQL, now, slots)
	if len(nodes) != 4 || perLoop > 1 || rows > float64(len(slots)) {
		t.Errorf("owner details: %v, %.0f rows (%.0f per loop); want 4 descents per owner, 1 row each", nodes, rows, perLoop)
	}
	for _, n := range nodes {
		if n != "Index Only Scan etl_job_claim_queue_owner_index" {
			t.Errorf("owner details: %v; want index-only scans of the owner index", nodes)
		}
	}
	ownerNodes, _, _ := queueNodes(t, pool, "etl_claim_owners", pg.OpsOwnerDetailSQL, now, slots)
	for _, n := range ownerNodes {
		if n != "Index Scan etl_claim_owners_pkey" {
			t.Errorf("owner details: etl_claim_owners read by %v; want its primary key", ownerNodes)
		}
	}

	nodes, rows, _ = queueNodes(t, pool, "etl_claim_owners", pg.OpsClaimOwnersSQL, now, 101)
	if rows > 101 {
		t.Errorf("claim owners capped at 101: %v, %.0f rows", nodes, rows)
	}
	t.Logf("claim owners (cap 101): %v, %.0f rows", nodes, rows)
}

// The operator's job list filters by priority, on the primary-key walk
// (any state, terminal ones) and on the active set (PENDING, RUNNING), and
// shows each job's priority.
func TestOpsListJobsByPriority(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := pgtest.SHA("priority-owner")
	high := pgtest.InsertN(t, pool, 2, pg.NewJob{PrincipalScopeHash: owner, Priority: 1})
	low := pgtest.InsertN(t, pool, 3, pg.NewJob{PrincipalScopeHash: owner, Priority: 4})
	// One low-priority job finishes: it is listed by the walk only.
	res, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: "priority-test", Limit: 5, LeaseDuration: time.Minute})
	if err != nil || len(res.Claimed) != 5 {
		t.Fatalf("claim: %d, %v", len(res.Claimed), err)
	}
	for _, c := range res.Claimed {
		if c.JobID == low[0] {
			if _, err := pgtest.SucceedOne(ctx, pool, c.Ref); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids := func(p pg.OpsListParams) []uuid.UUID {
		t.Helper()
		p.Limit = 50
		page, err := pg.OpsListJobs(ctx, pool, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []uuid.UUID
		for _, j := range page.Jobs {
			if p.Priority != 0 && j.Priority != p.Priority {
				t.Fatalf("%+v: job of priority %d listed", p, j.Priority)
			}
			out = append(out, j.JobID)
		}
		slices.SortFunc(out, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
		return out
	}
	sorted := func(in ...uuid.UUID) []uuid.UUID {
		out := slices.Clone(in)
		slices.SortFunc(out, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
		return out
	}
	if got := ids(pg.OpsListParams{Priority: 4}); !slices.Equal(got, sorted(low...)) {
		t.Fatalf("priority 4 (walk): %v, want %v", got, low)
	}
	if got := ids(pg.OpsListParams{Priority: 1}); !slices.Equal(got, sorted(high...)) {
		t.Fatalf("priority 1 (walk): %v, want %v", got, high)
	}
	if got := ids(pg.OpsListParams{Priority: 4, Status: pg.StatusRunning}); !slices.Equal(got, sorted(low[1:]...)) {
		t.Fatalf("RUNNING priority 4 (active set): %v, want %v", got, low[1:])
	}
	if got := ids(pg.OpsListParams{Priority: 4, Status: pg.StatusSucceeded}); !slices.Equal(got, sorted(low[0])) {
		t.Fatalf("SUCCEEDED priority 4: %v, want %v", got, low[:1])
	}
	if got := ids(pg.OpsListParams{Priority: 2}); len(got) != 0 {
		t.Fatalf("priority 2: %v, want none", got)
	}
	if got := ids(pg.OpsListParams{}); len(got) != 5 {
		t.Fatalf("any priority: %d jobs, want 5", len(got))
	}
	// The active set without a priority filter still shows priorities.
	page, err := pg.OpsListJobs(ctx, pool, pg.OpsListParams{Status: pg.StatusRunning, Limit: 50})
	if err != nil || len(page.Jobs) != 4 {
		t.Fatalf("RUNNING: %d, %v", len(page.Jobs), err)
	}
	for _, j := range page.Jobs {
		if want := map[bool]int{true: 1, false: 4}[slices.Contains(high, j.JobID)]; j.Priority != want {
			t.Fatalf("RUNNING job shows priority %d, want %d", j.Priority, want)
		}
	}
	for _, bad := range []int{-1, 5} {
		if _, err := pg.OpsListJobs(ctx, pool, pg.OpsListParams{Priority: bad, Limit: 50}); err == nil {
			t.Fatalf("priority %d accepted", bad)
		}
	}
}

// The intake role of the grant script reads the overview's owner counts
// (both the exact pass and the estimate) and the job list's priorities,
// yet still cannot read the claim queue's job ids.
func TestIntakeRoleReadsClaimableByOwner(t *testing.T) {
	admin, url := grantsSetup(t)
	ctx := context.Background()
	ip := rolePool(t, url, "mightyetl_intake_role")
	owner := pgtest.SHA("intake-owners")
	pgtest.InsertN(t, admin, 3, pg.NewJob{PrincipalScopeHash: owner, Priority: 3})
	seedQueue(t, admin, 3000, 3, false)
	now := dbNow(t, ip)
	for _, p := range []pg.OpsOwnersParams{{Now: now}, {Now: now, ExactLimit: 10, SamplePages: 5}} {
		got, err := pg.OpsClaimableByOwner(ctx, ip, p)
		if err != nil {
			t.Fatalf("as intake (%+v): %v", p, err)
		}
		if got.Estimated != (p.ExactLimit == 10) || got.ClaimOwners.Owners != 4 {
			t.Fatalf("as intake (%+v): estimated %v, %d claim owners", p, got.Estimated, got.ClaimOwners.Owners)
		}
	}
	page, err := pg.OpsListJobs(ctx, ip, pg.OpsListParams{Status: pg.StatusPending, Priority: 3, Limit: 50})
	if err != nil || len(page.Jobs) != 3 {
		t.Fatalf("PENDING priority 3 as intake: %d, %v", len(page.Jobs), err)
	}
	assertDenied(t, ip, "mightyetl_intake_role", map[string]string{
		"read the claim queue's job ids": `SELECT job_record_id FROM etl_job_claim_queue`,
	})
}

// BenchmarkOpsClaimableByOwner measures the overview's owner read on
// MIGHTYETL_CONSOLE_BENCH_ROWS queued rows (default 1,000,000; 90%
// claimable, so the counts are estimated) over 10,000 owners and reports
// p50 and p99:
//
//	go test -run '^$' -bench BenchmarkOpsClaimableByOwner -benchtime 100x ./internal/pg/
func BenchmarkOpsClaimableByOwner(b *testing.B) {
	rows := 1000000
	if v := os.Getenv("MIGHTYETL_CONSOLE_BENCH_ROWS"); v != "" {
		var err error
		if rows, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	pool, _ := pgtest.NewDatabase(b)
	seedQueue(b, pool, rows, 10000, false)
	ctx := context.Background()
	var d []time.Duration
	var last pg.ClaimableByOwner
	for b.Loop() {
		start := time.Now()
		var now time.Time
		if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			b.Fatal(err)
		}
		r, err := pg.OpsClaimableByOwner(ctx, pool, pg.OpsOwnersParams{Now: now})
		if err != nil {
			b.Fatal(err)
		}
		d, last = append(d, time.Since(start)), r
	}
	slices.Sort(d)
	pct := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	fmt.Fprintf(os.Stderr, "claimable by owner at %d queued rows, 10,000 owners: p50 %.2f ms, p99 %.2f ms (%d runs; estimated %v, %.3g%% sampled, %d claimable)\n",
		rows, pct(0.5), pct(0.99), len(d), last.Estimated, last.SampledPercent, last.Claimable)
}
