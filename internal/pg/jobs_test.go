package pg_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestInsertJobsRetryWithSameIDs: a caller that retries InsertJobs after
// its insert committed (on a pool it does, even when the call then fails)
// passes the same JobIDs and gets its own jobs back as created; a job under
// the same key with another id is somebody else's. Nothing is inserted twice.
func TestInsertJobsRetryWithSameIDs(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	job := pg.NewJob{JobID: uuid.Must(uuid.NewV7()), Kind: pg.KindETLRecords, PrincipalScopeHash: repeatHex("a"),
		SubmissionKeyHash: repeatHex("b"), RequestDigest: repeatHex("d"), Payload: "[]", MaxAttempts: 3}
	for _, step := range []string{"first", "retry"} {
		ins, err := pg.InsertJobs(ctx, pool, []pg.NewJob{job})
		if err != nil {
			t.Fatal(err)
		}
		if !ins[0].Created || ins[0].JobID != job.JobID {
			t.Errorf("%s: created %v, same id %v", step, ins[0].Created, ins[0].JobID == job.JobID)
		}
	}
	other := job
	other.JobID = uuid.Nil
	ins, err := pg.InsertJobs(ctx, pool, []pg.NewJob{other})
	if err != nil || ins[0].Created || ins[0].JobID != job.JobID {
		t.Errorf("another caller: %+v %v", ins, err)
	}
	var jobs, events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records`).Scan(&jobs); err != nil || jobs != 1 {
		t.Errorf("%d jobs (%v)", jobs, err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_outbox_job_events WHERE event_kind = 'job_available'`).Scan(&events); err != nil || events != 1 {
		t.Errorf("%d job_available events (%v)", events, err)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}
