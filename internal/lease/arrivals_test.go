package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// arrivals runs lease.ClaimArrivals for up to limit jobs.
func arrivals(t *testing.T, db pg.DBTX, limit int) []lease.Claim {
	t.Helper()
	res, err := lease.ClaimArrivals(context.Background(), db, lease.ClaimParams{
		OwnerID: "worker-arrivals", Limit: limit, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) > limit {
		t.Fatalf("claimed %d, more than the limit %d", len(res.Claimed), limit)
	}
	return res.Claimed
}

// A light owner's new job is claimed beside a backlog, and none of the
// backlog is (its oldest jobs are older than the window), though slots are
// to spare, even while another claim holds both owners' etl_claim_owners
// rows and the backlog's oldest jobs (a regular claim in progress whose
// snapshot predates the light owner's job).
func TestArrivalsClaimTakesALightOwnersNewJobAndNoBacklog(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	heavy := pgtest.InsertN(t, pool, lease.ArrivalsWindow+44, pg.NewJob{PrincipalScopeHash: pgtest.SHA("arrivals-heavy")})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// As a regular claim holds them for the length of its statement.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM etl_claim_owners FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM etl_job_claim_queue WHERE job_record_id = ANY($1) FOR UPDATE`, heavy[:100]); err != nil {
		t.Fatal(err)
	}
	if n := len(arrivals(t, pool, 8)); n != 0 {
		t.Fatalf("claimed %d of the backlog, want none", n)
	}
	light := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: pgtest.SHA("arrivals-light")})
	got := arrivals(t, pool, 8)
	if len(got) != 1 || got[0].JobID != light[0] {
		t.Fatalf("claimed %d jobs, want exactly the light owner's new job", len(got))
	}
	if got[0].Attempt != 1 || got[0].PickupDelay < 0 {
		t.Fatalf("claim attempt %d pickup %s", got[0].Attempt, got[0].PickupDelay)
	}
	if s := status(t, pool, light[0]); s != pg.StatusRunning {
		t.Fatalf("light job %s, want RUNNING", s)
	}
	// Claimed: the next arrivals claim finds nothing.
	if n := len(arrivals(t, pool, 8)); n != 0 {
		t.Fatalf("claimed %d more, want none", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}

// The arrivals claim takes the jobs of light owners only, whose claimable
// jobs all arrived within the window: at most ArrivalsPerOwner of each, in
// the owner's order (priority 1 first, then oldest), each owner's next job
// before any owner's second. An owner with an older claimable job gets
// nothing; a job claimable for longer than ArrivalsMaxAge is not an
// arrival. A job another claim holds is skipped.
func TestArrivalsClaimTakesOnlyLightOwnersJobs(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := pgtest.SHA("arrivals-light")
	first := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: owner})
	urgent := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: owner, Priority: 1})
	other := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: pgtest.SHA("arrivals-other")})
	// One slot: the owners' next jobs, the earlier arrival first.
	if got := arrivals(t, pool, 1); len(got) != 1 || got[0].JobID != urgent[0] {
		t.Fatalf("claimed %d jobs, want the owner's priority-1 job", len(got))
	}
	if got := arrivals(t, pool, 2); len(got) != 2 || got[0].JobID != first[0] || got[1].JobID != other[0] {
		t.Fatalf("claimed %d jobs, want the owner's remaining job and the other owner's, oldest first", len(got))
	}

	// A burst: at most ArrivalsPerOwner per claim, oldest first.
	burst := pgtest.InsertN(t, pool, lease.ArrivalsPerOwner+2, pg.NewJob{PrincipalScopeHash: pgtest.SHA("arrivals-burst")})
	got := arrivals(t, pool, 16)
	if len(got) != lease.ArrivalsPerOwner {
		t.Fatalf("claimed %d of a burst of %d, want %d", len(got), len(burst), lease.ArrivalsPerOwner)
	}
	for i, c := range got {
		if c.JobID != burst[i] {
			t.Fatalf("claim %d took the burst's job out of order", i)
		}
	}
	if got := arrivals(t, pool, 16); len(got) != 2 {
		t.Fatalf("claimed %d, want the burst's last 2", len(got))
	}
	// An older claimable job, outside the window: neither is taken.
	stale := pgtest.SHA("arrivals-stale")
	old := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: stale})
	pgtest.MakeAvailable(t, pool, old[0], 2*lease.ArrivalsMaxAge)
	if n := len(arrivals(t, pool, 8)); n != 0 {
		t.Fatalf("claimed %d jobs claimable for %s, want none", n, 2*lease.ArrivalsMaxAge)
	}
	pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: stale})
	if n := len(arrivals(t, pool, 8)); n != 0 {
		t.Fatalf("claimed %d of an owner with an older claimable job, want none", n)
	}

	// A job another claim holds is skipped, the owner's next one taken.
	held := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: owner})
	later := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: owner})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM etl_job_claim_queue WHERE job_record_id = $1 FOR UPDATE`, held[0]); err != nil {
		t.Fatal(err)
	}
	if got := arrivals(t, pool, 8); len(got) != 1 || got[0].JobID != later[0] {
		t.Fatalf("claimed %d jobs while the owner's earlier job is held, want the later one", len(got))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := arrivals(t, pool, 8); len(got) != 1 || got[0].JobID != held[0] {
		t.Fatalf("claimed %d jobs, want the earlier job once released", len(got))
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}

// ownerRow reads the etl_claim_owners row of owner (a scope hash): whether
// it is due by the database clock, and its idle visits.
func ownerRow(t *testing.T, db pg.DBTX, owner string) (due bool, idle int) {
	t.Helper()
	slot, _ := pg.OwnerSlot(owner)
	if err := db.QueryRow(context.Background(), `SELECT due_at <= clock_timestamp(), idle_visits FROM etl_claim_owners WHERE owner_slot = $1`,
		slot).Scan(&due, &idle); err != nil {
		t.Fatal(err)
	}
	return due, idle
}

// An owner whose jobs the arrivals claim took is not due to the fair claim
// for ArrivalsServedFor: the fair claim neither locks its row nor backs it
// off as found empty, so the owner's next insert takes no lock a claim
// holds. The insert makes it due at once. A row another claim holds keeps
// its state (and the job is still taken).
func TestArrivalsClaimKeepsTheFairClaimOffTheOwnersItServed(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := pgtest.SHA("served-light")
	pgtest.InsertN(t, pool, lease.ArrivalsWindow+8, pg.NewJob{PrincipalScopeHash: pgtest.SHA("served-heavy")})
	pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: owner})
	if n := len(arrivals(t, pool, 4)); n != 1 {
		t.Fatalf("claimed %d, want the light owner's job", n)
	}
	if due, idle := ownerRow(t, pool, owner); due || idle != 0 {
		t.Fatalf("light owner due %v after %d idle visits, want not due, 0", due, idle)
	}
	fairClaim(t, pool, 8)
	if due, idle := ownerRow(t, pool, owner); due || idle != 0 {
		t.Fatalf("after a fair claim the light owner is due %v after %d idle visits, want not visited", due, idle)
	}
	id := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: owner})[0]
	if due, _ := ownerRow(t, pool, owner); !due {
		t.Fatal("the light owner's insert left it not due")
	}

	// Its row held (as by a fair claim in progress): the job is still taken,
	// the row left as it was.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	slot, _ := pg.OwnerSlot(owner)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM etl_claim_owners WHERE owner_slot = $1 FOR UPDATE`, slot); err != nil {
		t.Fatal(err)
	}
	if got := arrivals(t, pool, 4); len(got) != 1 || got[0].JobID != id {
		t.Fatalf("claimed %d jobs while the owner's row is held, want its new job", len(got))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if due, _ := ownerRow(t, pool, owner); !due {
		t.Fatal("the held owner row was moved")
	}
}

// A lease that just expired is an arrival too: the job is reclaimed with a
// new attempt, or failed when its attempts are spent, as by ClaimJobs.
func TestArrivalsClaimReclaimsAnExpiredLease(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	id := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: pgtest.SHA("arrivals-expired"), MaxAttempts: 2})[0]
	for attempt := 1; attempt <= 2; attempt++ {
		got := arrivals(t, pool, 4)
		if len(got) != 1 || got[0].JobID != id || got[0].Attempt != attempt {
			t.Fatalf("attempt %d: claimed %d jobs, want the job at this attempt", attempt, len(got))
		}
		pgtest.ExpireLease(t, pool, id, time.Millisecond)
	}
	res, err := lease.ClaimArrivals(context.Background(), pool, lease.ClaimParams{
		OwnerID: "worker-arrivals", Limit: 4, LeaseDuration: time.Minute})
	if err != nil || len(res.Claimed) != 0 || res.Exhausted != 1 {
		t.Fatalf("claimed %d, exhausted %d, %v; want the spent job failed", len(res.Claimed), res.Exhausted, err)
	}
	if s := status(t, pool, id); s != pg.StatusFailed {
		t.Fatalf("job %s, want FAILED", s)
	}
}

// Planned once by a worker's pinned pool when one owner holds the whole
// queue (its backlog inserted and analyzed before the worker starts, as the
// fairness benchmark does), the arrivals claim beside that backlog stays an
// index plan reading O(window): no sequential or bitmap scan, no hash or
// merge join, and no node over a job table producing or filtering more
// than a few windows of rows. (Its first form probed each owner with an
// EXISTS that this plan served from the eligibility index with the owner
// as a filter: 82,240 rows filtered per owner per claim in the benchmark.)
func TestArrivalsClaimPlanBesideABacklog(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	pgtest.InsertN(t, pool, 50000, pg.NewJob{PrincipalScopeHash: pgtest.SHA("plan-heavy")})
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE etl_job_records, etl_job_claim_queue, etl_claim_owners`); err != nil {
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
	run := func() int {
		t.Helper()
		res, err := lease.ClaimArrivals(ctx, conn, lease.ClaimParams{OwnerID: "worker-plan", Limit: 16, LeaseDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Claimed)
	}
	// The heavy owner's oldest jobs run (claimed by a regular claim); its
	// backlog alone gives the arrivals claim nothing.
	if _, err := lease.ClaimJobs(ctx, pool, lease.ClaimParams{OwnerID: "worker-regular", Limit: 2000, LeaseDuration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if n := run(); n != 0 {
		t.Fatalf("claimed %d of the backlog, want none", n)
	}
	light := pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: pgtest.SHA("plan-light")})
	if n := run(); n != 1 {
		t.Fatalf("claimed %d, want the light owner's job", n)
	}
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT lease_owner_id = 'worker-plan' FROM etl_job_records WHERE job_record_id = $1`, light[0]).Scan(&ok); err != nil || !ok {
		t.Fatalf("light job not claimed by the arrivals claim (%v)", err)
	}
	pgtest.InsertN(t, pool, 1, pg.NewJob{PrincipalScopeHash: pgtest.SHA("plan-light-2")})
	name, generic, custom := preparedPlans(t, conn, lease.ArrivalsSQL)
	if custom != 0 || generic != 2 {
		t.Errorf("%d generic and %d custom plans, want 2 runs of the one generic plan", generic, custom)
	}
	args := "16, 'worker-plan', 60000000"
	nodes, maxRows := explainExecute(t, conn, name, args)
	filtered := explainFiltered(t, conn, name, args)
	for _, n := range nodes {
		for _, bad := range []string{"Seq Scan", "Bitmap", "Hash Join", "Merge Join"} {
			if strings.HasPrefix(n, bad) {
				t.Errorf("arrivals plan has %q: %v", n, nodes)
			}
		}
	}
	if bound := float64(4 * lease.ArrivalsWindow); maxRows > bound || filtered > bound {
		t.Errorf("a node over a job table produced %v rows and filtered %v beside a 50,000-job backlog, want O(window): %v",
			maxRows, filtered, nodes)
	}
}
