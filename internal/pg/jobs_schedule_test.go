package pg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// dbNow is the database clock.
func dbNow(t *testing.T, db pg.DBTX) time.Time {
	t.Helper()
	var now time.Time
	if err := db.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// TestScheduleIsReadBackEverywhereTheOwnerSeesAJob: the priority and
// notBefore a job is inserted with come back from the insert itself, from
// a resubmission under its key (the first job's, whatever the second
// asked), from GetJob, ListJobs (also filtered by priority),
// FindSubmittedJob, a cancellation (priority only: a cancelled job is never
// claimable) and a replay (the source's priority unless the replay names
// one). A notBefore already past is stored as the database clock at the
// insert, so it does not overtake the jobs queued before it.
func TestScheduleIsReadBackEverywhereTheOwnerSeesAJob(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := pgtest.SHA("schedule-owner")
	now := dbNow(t, pool)
	later := now.Add(time.Hour).Truncate(time.Microsecond)
	past := now.Add(-time.Hour)
	newJob := func(key string, priority int, notBefore time.Time) pg.NewJob {
		return pg.NewJob{Kind: pg.KindETLRecords, PrincipalScopeHash: owner, SubmissionKeyHash: pgtest.SHA(key),
			RequestDigest: pgtest.SHA("[]"), Payload: "[]", MaxAttempts: 3, Priority: priority, NotBefore: notBefore}
	}
	ins, err := pg.InsertJobs(ctx, pool, []pg.NewJob{
		newJob("default", 0, time.Time{}), newJob("scheduled", 1, later), newJob("past", 4, past)})
	if err != nil {
		t.Fatal(err)
	}
	plain, scheduled, pastJob := ins[0].Job, ins[1].Job, ins[2].Job
	check := func(what string, j pg.Job, priority int, notBefore time.Time) {
		t.Helper()
		if j.Priority != priority || !j.NotBefore.Equal(notBefore) {
			t.Errorf("%s: priority %d notBefore %v, want %d %v", what, j.Priority, j.NotBefore, priority, notBefore)
		}
	}
	check("insert default", plain, pg.DefaultPriority, time.Time{})
	check("insert scheduled", scheduled, 1, later)
	check("insert past", pastJob, 4, time.Time{})
	if !scheduled.AvailableAt.Equal(later) || pastJob.AvailableAt.Before(now) {
		t.Errorf("available_at: scheduled %v (want %v), past %v (want the insert's clock, after %v)",
			scheduled.AvailableAt, later, pastJob.AvailableAt, now)
	}
	var claimableAt time.Time
	if err := pool.QueryRow(ctx, `SELECT claimable_at FROM etl_job_claim_queue WHERE job_record_id = $1`,
		pastJob.JobID).Scan(&claimableAt); err != nil || claimableAt.Before(now) {
		t.Errorf("past notBefore queued at %v (%v), want not before %v", claimableAt, err, now)
	}

	// A resubmission under the same key asks for another schedule: the
	// first job's comes back.
	again, err := pg.InsertJobs(ctx, pool, []pg.NewJob{newJob("scheduled", 3, time.Time{})})
	if err != nil || again[0].Created || again[0].JobID != scheduled.JobID {
		t.Fatalf("resubmission: %+v %v", again, err)
	}
	check("resubmission", again[0].Job, 1, later)
	found, err := pg.FindSubmittedJob(ctx, pool, owner, pgtest.SHA("scheduled"))
	if err != nil {
		t.Fatal(err)
	}
	check("submission lookup", found, 1, later)

	got, err := pg.GetJob(ctx, pool, owner, scheduled.JobID)
	if err != nil {
		t.Fatal(err)
	}
	check("get", got, 1, later)
	list, err := pg.ListJobs(ctx, pool, pg.ListParams{PrincipalScopeHash: owner, Priority: 1, Limit: 10})
	if err != nil || len(list) != 1 || list[0].JobID != scheduled.JobID {
		t.Fatalf("list priority 1: %+v %v", list, err)
	}
	check("list", list[0], 1, later)
	if list, err := pg.ListJobs(ctx, pool, pg.ListParams{PrincipalScopeHash: owner, Limit: 10}); err != nil || len(list) != 3 {
		t.Fatalf("list: %d jobs, %v", len(list), err)
	}

	// Cancelling the scheduled (PENDING) job: its priority stays, its
	// notBefore goes; so on the cancellation's replay read.
	cp := pg.CancelParams{PrincipalScopeHash: owner, JobID: scheduled.JobID, CancellationKeyHash: pgtest.SHA("cancel")}
	out, err := pg.CancelJob(ctx, pool, cp)
	if err != nil || !out.Cancelled || out.PreviousStatus != pg.StatusPending || out.Job.Status != pg.StatusCancelled {
		t.Fatalf("cancel: %+v %v", out, err)
	}
	check("cancel", out.Job, 1, time.Time{})
	out, err = pg.CancelJob(ctx, pool, cp)
	if err != nil || out.Cancelled {
		t.Fatalf("cancel again: %+v %v", out, err)
	}
	check("cancel again", out.Job, 1, time.Time{})
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_claim_queue WHERE job_record_id = $1`, scheduled.JobID); n != 0 {
		t.Errorf("the cancelled scheduled job is still queued (%d rows)", n)
	}

	// Replays: the source's priority at once, or the replay's own.
	rp := pg.ReplayParams{PrincipalScopeHash: owner, SourceJobID: scheduled.JobID, ReplayKeyHash: pgtest.SHA("replay-1"),
		RequestDigest: pgtest.SHA("[]"), Payload: "[]"}
	r1, err := pg.ReplayJob(ctx, pool, rp)
	if err != nil || !r1.Created {
		t.Fatalf("replay: %+v %v", r1, err)
	}
	check("replay with the source's priority", r1.Job, 1, time.Time{})
	rp.ReplayKeyHash, rp.Priority, rp.NotBefore = pgtest.SHA("replay-2"), 3, later
	r2, err := pg.ReplayJob(ctx, pool, rp)
	if err != nil || !r2.Created {
		t.Fatalf("scheduled replay: %+v %v", r2, err)
	}
	check("scheduled replay", r2.Job, 3, later)
	rp.Priority, rp.NotBefore = 4, time.Time{}
	r3, err := pg.ReplayJob(ctx, pool, rp)
	if err != nil || r3.Created || r3.Job.JobID != r2.Job.JobID {
		t.Fatalf("replay again: %+v %v", r3, err)
	}
	check("replay again (the first replay's schedule)", r3.Job, 3, later)
	var stored int
	if err := pool.QueryRow(ctx, `SELECT priority FROM etl_job_claim_queue WHERE job_record_id = $1`, r2.Job.JobID).Scan(&stored); err != nil || stored != 3 {
		t.Errorf("scheduled replay queued with priority %d (%v)", stored, err)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}

// TestNotBeforeIsShownOnlyWhileTheDatabaseClockIsBeforeIt: a PENDING job's
// notBefore is its available_at while that is later than the database clock
// at the read, and absent once the clock has passed it (moved back here
// rather than waited for).
func TestNotBeforeIsShownOnlyWhileTheDatabaseClockIsBeforeIt(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := pgtest.SHA("clock-owner")
	later := dbNow(t, pool).Add(time.Hour)
	id := pgtest.InsertJobs(t, pool, pg.NewJob{PrincipalScopeHash: owner, NotBefore: later})[0]
	j, err := pg.GetJob(ctx, pool, owner, id)
	if err != nil || j.NotBefore.IsZero() {
		t.Fatalf("scheduled job: %+v %v", j, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE etl_job_records SET available_at = clock_timestamp() - interval '1 second'
		WHERE job_record_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	j, err = pg.GetJob(ctx, pool, owner, id)
	if err != nil || !j.NotBefore.IsZero() || j.AvailableAt.IsZero() || j.Priority != pg.DefaultPriority {
		t.Fatalf("after its notBefore: %+v %v", j, err)
	}
	if _, err := pg.GetJob(ctx, pool, pgtest.SHA("someone else"), id); !errors.Is(err, pg.ErrNotFound) {
		t.Errorf("foreign read: %v", err)
	}
}
