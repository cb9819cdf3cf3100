package pg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// TestGetJobProgress: GetJob fills Progress from the load's checkpoint for
// a chunked job only, nil before the first chunk's fields, and a chunked
// job whose load row is gone has no Progress (and is still found).
func TestGetJobProgress(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := pgtest.SHA(pgtest.DefaultFixtureOwner)
	total := int64(5000)
	failedAt := int64(4242)
	fresh := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{PartBytes: []int64{700, 300}})
	running := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Status: pg.StatusRunning, RecordsTotal: &total,
		PartBytes: []int64{700, 300}, Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 3, RecordsLoaded: 2998, BadRecords: 2,
			NextPartNumber: 2, NextPartOffset: 10}})
	failed := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Status: pg.StatusFailed,
		Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 4, RecordsLoaded: 4000, FailedRecordNumber: &failedAt}})
	small := pgtest.InsertJobs(t, pool, pg.NewJob{})[0]

	j, err := pg.GetJob(ctx, pool, owner, fresh)
	if err != nil {
		t.Fatal(err)
	}
	if p := j.Progress; j.Kind != pg.KindETLChunked || p == nil || p.RecordsLoaded != 0 || p.ChunksDone != 0 ||
		p.RecordsTotal != nil || p.LastCheckpointAt != nil || p.FailedRecordNumber != nil || p.PayloadBytes != 1000 {
		t.Errorf("fresh: %+v %+v", j, j.Progress)
	}
	j, err = pg.GetJob(ctx, pool, owner, running)
	if err != nil {
		t.Fatal(err)
	}
	var dbNow time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	if p := j.Progress; p == nil || p.RecordsLoaded != 2998 || p.BadRecords != 2 || p.ChunksDone != 3 ||
		p.RecordsTotal == nil || *p.RecordsTotal != total || p.LastCheckpointAt == nil || p.LastCheckpointAt.After(dbNow) ||
		p.FailedRecordNumber != nil || p.PayloadBytes != 1000 {
		t.Errorf("running: %+v", j.Progress)
	}
	j, err = pg.GetJob(ctx, pool, owner, failed)
	if err != nil {
		t.Fatal(err)
	}
	if p := j.Progress; j.Status != pg.StatusFailed || p == nil || p.FailedRecordNumber == nil || *p.FailedRecordNumber != failedAt {
		t.Errorf("failed: %+v %+v", j, j.Progress)
	}
	if j, err := pg.GetJob(ctx, pool, owner, small); err != nil || j.Progress != nil {
		t.Errorf("small job: %+v %v", j.Progress, err)
	}
	// Another owner sees nothing, progress included.
	if _, err := pg.GetJob(ctx, pool, pgtest.SHA("someone else"), running); !errors.Is(err, pg.ErrNotFound) {
		t.Errorf("foreign chunked job: %v", err)
	}
	// The load row pruned: the job stays readable without progress.
	if _, err := pool.Exec(ctx, `DELETE FROM etl_chunked_loads WHERE job_record_id = $1`, failed); err != nil {
		t.Fatal(err)
	}
	if j, err := pg.GetJob(ctx, pool, owner, failed); err != nil || j.Progress != nil {
		t.Errorf("without load row: %+v %v", j.Progress, err)
	}
}

// TestListJobsProgress: a page mixing small and chunked jobs carries each
// chunked job's own Progress (one batched read) and none on the others; a
// page without chunked jobs runs no further statement at all
// (AttachProgress never touches its database handle, here nil).
func TestListJobsProgress(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := pgtest.SHA(pgtest.DefaultFixtureOwner)
	want := map[uuid.UUID]int64{}
	for i := range 3 {
		pgtest.InsertJobs(t, pool, pg.NewJob{})
		id := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Status: pg.StatusRunning,
			Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: int64(i + 1), RecordsLoaded: int64(100 * (i + 1))}})
		want[id] = int64(100 * (i + 1))
	}
	pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Owner: pgtest.SHA("someone else")})
	jobs, err := pg.ListJobs(ctx, pool, pg.ListParams{PrincipalScopeHash: owner, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 6 {
		t.Fatalf("%d jobs, want 6", len(jobs))
	}
	for _, j := range jobs {
		loaded, chunked := want[j.JobID]
		switch {
		case chunked && (j.Progress == nil || j.Progress.RecordsLoaded != loaded || j.Progress.ChunksDone != loaded/100):
			t.Errorf("chunked job %s: %+v", j.JobID, j.Progress)
		case !chunked && (j.Kind != pg.KindETLRecords || j.Progress != nil):
			t.Errorf("small job %s: %s %+v", j.JobID, j.Kind, j.Progress)
		}
	}
	// Inside a transaction too (the progress read follows the closed rows).
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if jobs, err := pg.ListJobs(ctx, tx, pg.ListParams{PrincipalScopeHash: owner, Status: pg.StatusRunning, Limit: 2}); err != nil ||
		len(jobs) != 2 || jobs[0].Progress == nil || jobs[1].Progress == nil {
		t.Errorf("in a transaction: %d jobs, %v", len(jobs), err)
	}
	small := []pg.Job{{JobID: uuid.New(), Kind: pg.KindETLRecords}, {JobID: uuid.New(), Kind: pg.KindDiagnostic}}
	if err := pg.AttachProgress(ctx, nil, small); err != nil || small[0].Progress != nil || small[1].Progress != nil {
		t.Errorf("small jobs: %v", err)
	}
}

// TestListBadRecords: keyset pages in record-number order, owner-scoped
// (a foreign or absent job is ErrNotFound), an owned job without bad
// records (any kind) is an empty page.
func TestListBadRecords(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	owner := pgtest.SHA(pgtest.DefaultFixtureOwner)
	id := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Status: pg.StatusRunning, MaxBadRecords: 10,
		BadRecords: []int64{907, 3, 15, 1_000_000_001, 44}})
	other := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{BadRecords: []int64{1, 2}})
	var got []int64
	after := int64(0)
	pages := 0
	for {
		page, err := pg.ListBadRecords(ctx, pool, owner, id, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, b := range page {
			if b.ErrorCode != "etl_invalid_record" {
				t.Errorf("record %d: code %q", b.RecordNumber, b.ErrorCode)
			}
			got = append(got, b.RecordNumber)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].RecordNumber
	}
	want := []int64{3, 15, 44, 907, 1_000_000_001}
	if len(got) != len(want) || pages != 3 {
		t.Fatalf("got %v in %d pages, want %v in 3", got, pages, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if _, err := pg.ListBadRecords(ctx, pool, pgtest.SHA("someone else"), id, 0, 10); !errors.Is(err, pg.ErrNotFound) {
		t.Errorf("foreign: %v", err)
	}
	if _, err := pg.ListBadRecords(ctx, pool, owner, uuid.New(), 0, 10); !errors.Is(err, pg.ErrNotFound) {
		t.Errorf("absent: %v", err)
	}
	small := pgtest.InsertJobs(t, pool, pg.NewJob{})[0]
	if page, err := pg.ListBadRecords(ctx, pool, owner, small, 0, 10); err != nil || len(page) != 0 {
		t.Errorf("small job: %v %v", page, err)
	}
	if page, err := pg.ListBadRecords(ctx, pool, owner, other, 2, 10); err != nil || len(page) != 0 {
		t.Errorf("past the last: %v %v", page, err)
	}
	if _, err := pg.ListBadRecords(ctx, pool, owner, id, 0, 0); err == nil {
		t.Error("limit 0 accepted")
	}
}

// TestOpsJobProgress: the operator's read adds the load state, the
// allowance and the byte position of the checkpoint (the parts before the
// checkpoint's part plus its offset); without the parts (a terminal job's
// were deleted) the position past part 1 is unknown.
func TestOpsJobProgress(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	id := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Status: pg.StatusRunning, MaxBadRecords: 7,
		PartBytes: []int64{700, 200, 100}, SubmittedAgo: time.Minute,
		Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 2, RecordsLoaded: 20, NextPartNumber: 3, NextPartOffset: 40}})
	p, err := pg.OpsJobProgress(ctx, pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if p.LoadState != "LOADING" || p.MaxBadRecords != 7 || p.BytesDone == nil || *p.BytesDone != 940 ||
		p.RecordsLoaded != 20 || p.PayloadBytes != 1000 || p.LastCheckpointAt == nil || !p.CreatedAt.Before(*p.LastCheckpointAt) {
		t.Errorf("progress %+v bytes %v", p, p.BytesDone)
	}
	pgtest.SetChunkedCheckpoint(t, pool, id, pgtest.ChunkedCheckpoint{ChunksDone: 1, RecordsLoaded: 9, NextPartOffset: 55})
	if p, err := pg.OpsJobProgress(ctx, pool, id); err != nil || p.BytesDone == nil || *p.BytesDone != 55 {
		t.Errorf("in part 1: %v %v", p.BytesDone, err)
	}
	pgtest.SetChunkedCheckpoint(t, pool, id, pgtest.ChunkedCheckpoint{ChunksDone: 3, RecordsLoaded: 30, NextPartNumber: 4})
	if p, err := pg.OpsJobProgress(ctx, pool, id); err != nil || p.BytesDone == nil || *p.BytesDone != 1000 {
		t.Errorf("all parts read: %v %v", p.BytesDone, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM etl_upload_parts`); err != nil {
		t.Fatal(err)
	}
	if p, err := pg.OpsJobProgress(ctx, pool, id); err != nil || p.BytesDone != nil {
		t.Errorf("parts gone: %v %v", p.BytesDone, err)
	}
	if _, err := pg.OpsJobProgress(ctx, pool, uuid.New()); !errors.Is(err, pg.ErrNotFound) {
		t.Errorf("no load: %v", err)
	}
}

// TestProgressReadsUnderTheIntakeRole: the intake role of the grant script
// (deploy/postgres/least-privilege.sql) can run every read of this file:
// GetJob and ListJobs with a chunked job's progress, the bad-record page
// and the console's load read with its byte position.
func TestProgressReadsUnderTheIntakeRole(t *testing.T) {
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	applyGrantScript(t, ctx, conn)
	owner := pgtest.SHA(pgtest.DefaultFixtureOwner)
	id := pgtest.InsertChunkedJob(t, pool, pgtest.ChunkedJob{Status: pg.StatusRunning, MaxBadRecords: 3, BadRecords: []int64{5},
		PartBytes: []int64{10, 20}, Checkpoint: &pgtest.ChunkedCheckpoint{ChunksDone: 1, RecordsLoaded: 4, BadRecords: 1,
			NextPartNumber: 2, NextPartOffset: 5}})
	err = pg.WithTx(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE mightyetl_intake_role"); err != nil {
			return err
		}
		j, err := pg.GetJob(ctx, tx, owner, id)
		if err != nil || j.Progress == nil || j.Progress.RecordsLoaded != 4 {
			return fmt.Errorf("get job: %+v %w", j.Progress, err)
		}
		jobs, err := pg.ListJobs(ctx, tx, pg.ListParams{PrincipalScopeHash: owner, Limit: 5})
		if err != nil || len(jobs) != 1 || jobs[0].Progress == nil {
			return fmt.Errorf("list jobs: %d %w", len(jobs), err)
		}
		bad, err := pg.ListBadRecords(ctx, tx, owner, id, 0, 5)
		if err != nil || len(bad) != 1 || bad[0].RecordNumber != 5 {
			return fmt.Errorf("bad records: %v %w", bad, err)
		}
		p, err := pg.OpsJobProgress(ctx, tx, id)
		if err != nil || p.BytesDone == nil || *p.BytesDone != 15 {
			return fmt.Errorf("ops progress: %v %w", p.BytesDone, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
