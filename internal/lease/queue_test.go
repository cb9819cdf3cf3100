package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// queueRow reads the claim-queue row of a job; ok is false when it has none.
func queueRow(t *testing.T, db pg.DBTX, id uuid.UUID) (claimableAt time.Time, ok bool) {
	t.Helper()
	err := db.QueryRow(context.Background(),
		`SELECT claimable_at FROM etl_job_claim_queue WHERE job_record_id = $1`, id).Scan(&claimableAt)
	if pg.IsNoRows(err) {
		return time.Time{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return claimableAt, true
}

// Every statement that changes a job's state keeps its claim-queue row in
// step, in the same statement: a PENDING job's row is claimable at
// available_at, a RUNNING job's no earlier than its lease expiry (renewal
// included), and a terminal job has none. Walks every transition.
func TestEveryTransitionKeepsTheClaimQueueInStep(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	ids := pgtest.InsertN(t, pool, 5, pg.NewJob{MaxAttempts: 3})
	for _, id := range ids {
		at, ok := queueRow(t, pool, id)
		var avail time.Time
		if err := pool.QueryRow(ctx, `SELECT available_at FROM etl_job_records WHERE job_record_id=$1`, id).Scan(&avail); err != nil {
			t.Fatal(err)
		}
		if !ok || !at.Equal(avail) {
			t.Fatalf("inserted job: queue row %v %v, want claimable at available_at %v", ok, at, avail)
		}
	}
	pgtest.AssertClaimQueueConsistent(t, pool)

	res := claim(t, pool, "worker-queue-a", 5, time.Minute)
	if len(res.Claimed) != 5 {
		t.Fatalf("claimed %d, want 5", len(res.Claimed))
	}
	for _, c := range res.Claimed {
		at, ok := queueRow(t, pool, c.JobID)
		if !ok || at.Before(c.ExpiresAt) || at.Sub(c.ExpiresAt) > time.Second {
			t.Fatalf("claimed job: queue row %v at %v, want at or just after the lease expiry %v", ok, at, c.ExpiresAt)
		}
	}
	pgtest.AssertClaimQueueConsistent(t, pool)

	// Renewal moves the queue row with the lease.
	ren, err := lease.Renew(ctx, pool, "worker-queue-a", []lease.Ref{res.Claimed[0].Ref}, time.Hour)
	if err != nil || !ren[0].Renewed {
		t.Fatalf("renew: %v %+v", err, ren)
	}
	if at, ok := queueRow(t, pool, res.Claimed[0].JobID); !ok || at.Before(ren[0].ExpiresAt) {
		t.Fatalf("renewed job: queue row %v at %v, want at or after %v", ok, at, ren[0].ExpiresAt)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)

	// Success and failure remove the row; retry and release move it to the
	// new available_at.
	if _, err := pgtest.SucceedOne(ctx, pool, res.Claimed[0].Ref); err != nil {
		t.Fatal(err)
	}
	if err := lease.Fail(ctx, pool, res.Claimed[1].Ref, codes.TargetFailure); err != nil {
		t.Fatal(err)
	}
	if err := lease.Retry(ctx, pool, res.Claimed[2].Ref, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx, pool, res.Claimed[3].Ref); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, false, true, true} {
		if _, ok := queueRow(t, pool, res.Claimed[i].JobID); ok != want {
			t.Errorf("job %d: queue row %v, want %v", i, ok, want)
		}
	}
	pgtest.AssertClaimQueueConsistent(t, pool)

	// Cancellation removes the row of a RUNNING and of a PENDING job.
	for _, id := range []uuid.UUID{res.Claimed[4].JobID, res.Claimed[3].JobID} {
		out, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: pgtest.SHA("owner"), JobID: id, CancellationKeyHash: pgtest.SHA(id.String())})
		if err != nil || !out.Cancelled {
			t.Fatalf("cancel: %v %+v", err, out)
		}
		if _, ok := queueRow(t, pool, id); ok {
			t.Errorf("cancelled job kept its queue row")
		}
	}
	pgtest.AssertClaimQueueConsistent(t, pool)

	// An exhausted expired lease leaves the queue when the claim fails it.
	last := pgtest.InsertN(t, pool, 1, pg.NewJob{MaxAttempts: 1})[0]
	c := claim(t, pool, "worker-queue-a", 1, time.Minute)
	if len(c.Claimed) != 1 || c.Claimed[0].JobID != last {
		t.Fatalf("claim single-attempt job: %+v", c)
	}
	pgtest.ExpireLease(t, pool, last, time.Millisecond)
	if got := claim(t, pool, "worker-queue-b", 10, time.Minute); got.Exhausted != 1 {
		t.Fatalf("exhausted %d, want 1", got.Exhausted)
	}
	if _, ok := queueRow(t, pool, last); ok {
		t.Error("exhausted job kept its queue row")
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}

// The queue row is a hint, never an authority: a queue row that says
// "claimable now" for a job whose lease is live (a hand edit, or any future
// bug) does not let a claim take the job, because the claim re-checks the
// job row under its lock.
func TestClaimRechecksTheJobRowNotTheQueueHint(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	ids := pgtest.InsertN(t, pool, 1, pg.NewJob{MaxAttempts: 3})
	first := claim(t, pool, "worker-hint-a", 1, time.Hour)
	if len(first.Claimed) != 1 {
		t.Fatal("first claim failed")
	}
	if _, err := pool.Exec(ctx, `UPDATE etl_job_claim_queue SET claimable_at = clock_timestamp() - interval '1 hour' WHERE job_record_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, pool, "worker-hint-b", 1, time.Hour); len(got.Claimed) != 0 || got.Exhausted != 0 {
		t.Fatalf("a live lease was taken through a stale queue hint: %+v", got)
	}
	if _, err := pgtest.SucceedOne(ctx, pool, first.Claimed[0].Ref); err != nil {
		t.Fatalf("the live lease lost authority: %v", err)
	}
}

// Claim, renewal and finish change no indexed column of etl_job_records, so
// with room on the page they are HOT updates: heap-only, no index entry.
// Counted by PostgreSQL itself, not inferred: on one connection, the table's
// flushed counters plus this backend's pending ones (the sum does not depend
// on when the backend flushes), before and after each step, each step in its
// own transaction as the worker runs it.
//
// Room on the page without pruning: under load a concurrent statement's
// snapshot (a claim's, an insert's) keeps the versions a claim made dead
// unprunable for a while, and a zero-duration job is finished within
// milliseconds of its claim. The test holds such a snapshot open throughout,
// so nothing is pruned. At the production fillfactor (30, migration 00018) a
// page filled by inserts has room for the claimed and the finished version
// of every row on it, so claim and finish are checked at it, back to back;
// at the former 40 the finish is not HOT here. A renewal adds a third
// version, which fits only after pruning (renewals come a third of a lease
// after the claim); so claim, renewal and finish are checked again on rows
// inserted at fillfactor 20, where every version fits, which isolates what
// this part is about: that no statement changes an indexed column.
func TestClaimRenewAndFinishOfJobRowsAreHOT(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	const n = 200
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET stats_fetch_consistency = none`); err != nil {
		t.Fatal(err)
	}
	counts := func() (updated, hot int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT
			pg_stat_get_tuples_updated('etl_job_records'::regclass) + pg_stat_get_xact_tuples_updated('etl_job_records'::regclass),
			pg_stat_get_tuples_hot_updated('etl_job_records'::regclass) + pg_stat_get_xact_tuples_hot_updated('etl_job_records'::regclass)`).
			Scan(&updated, &hot); err != nil {
			t.Fatal(err)
		}
		return updated, hot
	}
	step := func(name string, fn func(tx pgx.Tx) error) {
		t.Helper()
		u0, h0 := counts()
		if err := pg.WithTx(ctx, conn, fn); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		u1, h1 := counts()
		if updated, hot := u1-u0, h1-h0; updated != n || hot != updated {
			t.Fatalf("%s: %d HOT of %d job row updates, want all %d HOT", name, hot, updated, n)
		}
	}
	claimAll := func(owner string) []lease.Ref {
		var refs []lease.Ref
		step("claim", func(tx pgx.Tx) error {
			res, err := lease.ClaimJobs(ctx, tx, lease.ClaimParams{OwnerID: owner, Limit: n, LeaseDuration: time.Minute})
			for _, c := range res.Claimed {
				refs = append(refs, c.Ref)
			}
			return err
		})
		return refs
	}

	var ff string
	if err := conn.QueryRow(ctx, `SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'etl_job_records'::regclass`).Scan(&ff); err != nil || ff != "fillfactor=30" {
		t.Fatalf("etl_job_records options %q (%v), want fillfactor=30", ff, err)
	}
	// The old snapshot: taken before the jobs exist, held to the end.
	snap, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = snap.Rollback(ctx) }()
	if _, err := snap.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`); err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Exec(ctx, `SELECT count(*) FROM etl_job_records`); err != nil {
		t.Fatal(err)
	}
	pgtest.InsertN(t, pool, n, pg.NewJob{MaxAttempts: 3})
	refs := claimAll("worker-hot-aaaa")
	step("succeed", func(tx pgx.Tx) error {
		won, err := lease.Succeed(ctx, tx, "worker-hot-aaaa", refs)
		if err == nil && len(won) != n {
			t.Fatalf("won %d, want %d", len(won), n)
		}
		return err
	})

	if _, err := conn.Exec(ctx, `ALTER TABLE etl_job_records SET (fillfactor = 20)`); err != nil {
		t.Fatal(err)
	}
	pgtest.InsertN(t, pool, n, pg.NewJob{MaxAttempts: 3})
	refs = claimAll("worker-hot-bbbb")
	step("renew", func(tx pgx.Tx) error {
		_, err := lease.Renew(ctx, tx, "worker-hot-bbbb", refs, time.Hour)
		return err
	})
	step("succeed", func(tx pgx.Tx) error {
		won, err := lease.Succeed(ctx, tx, "worker-hot-bbbb", refs)
		if err == nil && len(won) != n {
			t.Fatalf("won %d, want %d", len(won), n)
		}
		return err
	})
}

// Deleting jobs removes their queue rows (the statement-level cascade of
// migration 00005), a queue row without a job is skipped by the claim and
// removed by pg.PruneOrphanQueueRows, and neither disturbs a claimable job.
func TestQueueRowsFollowDeletedJobsAndOrphansAreSkippedAndPruned(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	ids := pgtest.InsertN(t, pool, 3, pg.NewJob{MaxAttempts: 3})
	if _, err := pool.Exec(ctx, `DELETE FROM etl_job_records WHERE job_record_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, ok := queueRow(t, pool, ids[0]); ok {
		t.Fatal("a deleted job kept its queue row")
	}
	orphan := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) VALUES ($1, clock_timestamp() - interval '1 hour')`, orphan); err != nil {
		t.Fatal(err)
	}
	got := claim(t, pool, "worker-orphan-a", 10, time.Minute)
	if len(got.Claimed) != 2 {
		t.Fatalf("claimed %d, want the 2 real jobs past the orphan", len(got.Claimed))
	}
	n, err := pg.PruneOrphanQueueRows(ctx, pool)
	if err != nil || n != 1 {
		t.Fatalf("prune orphans: %d %v, want 1", n, err)
	}
	if _, ok := queueRow(t, pool, orphan); ok {
		t.Fatal("orphan queue row survived the prune")
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}

// A worker can hold two claims of one job: an expired one it still runs and
// the one it took when it reclaimed the job. Presented together, only the
// current claim renews and only it wins the finish; results are keyed by
// claim, not by job (issue 12, defect 6).
func TestRenewAndSucceedTellTwoClaimsOfOneJobApart(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	id := pgtest.InsertN(t, pool, 1, pg.NewJob{MaxAttempts: 3})[0]
	old := claim(t, pool, "worker-twice-1", 1, time.Minute).Claimed[0]
	pgtest.ExpireLease(t, pool, id, time.Millisecond)
	cur := claim(t, pool, "worker-twice-1", 1, time.Minute).Claimed[0]
	if cur.JobID != id || cur.ClaimID == old.ClaimID {
		t.Fatalf("reclaim: %+v", cur)
	}
	ren, err := lease.Renew(ctx, pool, "worker-twice-1", []lease.Ref{old.Ref, cur.Ref}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ren[0].Renewed || !ren[1].Renewed {
		t.Fatalf("renewed old %v, current %v; want only the current", ren[0].Renewed, ren[1].Renewed)
	}
	won, err := lease.Succeed(ctx, pool, "worker-twice-1", []lease.Ref{old.Ref, cur.Ref})
	if err != nil {
		t.Fatal(err)
	}
	if len(won) != 1 || won[0].ClaimID != cur.ClaimID || won[0].JobID != id {
		t.Fatalf("won %+v, want only the current claim %v", won, cur.ClaimID)
	}
}
