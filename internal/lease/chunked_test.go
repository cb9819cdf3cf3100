package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

func claimChunked(t *testing.T, db pg.DBTX, owner string, limit int) lease.ClaimResult {
	t.Helper()
	res, err := lease.ClaimChunkedJobs(context.Background(), db, lease.ClaimParams{OwnerID: owner, Limit: limit, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Chunked jobs are claimed oldest first by their own statement, never by
// ClaimJobs; a retried job waits for its backoff, a released one is
// claimable at once; every fenced write of a lost claim matches nothing.
func TestChunkedClaimRetryReleaseAndFence(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	var ids []uuid.UUID
	for range 3 {
		id, _ := pgtest.InsertChunkedUpload(t, db, pgtest.ChunkedUpload{Parts: [][]byte{[]byte(`{"id":"a"}` + "\n")}})
		ids = append(ids, id)
	}
	if res := claim(t, db, "small-worker-1", 10, time.Minute); len(res.Claimed) != 0 {
		t.Fatalf("ClaimJobs took %d chunked jobs", len(res.Claimed))
	}
	res := claimChunked(t, db, "chunked-worker-1", 2)
	if len(res.Claimed) != 2 || res.Claimed[0].JobID != ids[0] || res.Claimed[1].JobID != ids[1] {
		t.Fatalf("claimed %+v, want the two oldest", res.Claimed)
	}
	first, second := res.Claimed[0], res.Claimed[1]
	if first.Kind != pg.KindETLChunked || first.Attempt != 1 || first.Payload == "" {
		t.Fatalf("claim %+v", first)
	}
	if err := lease.RetryChunked(ctx, db, first.Ref, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx, db, second.Ref); err != nil {
		t.Fatal(err)
	}
	res = claimChunked(t, db, "chunked-worker-2", 10)
	if len(res.Claimed) != 2 || res.Claimed[0].JobID != ids[1] || res.Claimed[1].JobID != ids[2] {
		t.Fatalf("claimed %+v, want the released and the third job (the retried one waits)", res.Claimed)
	}
	if res.Claimed[0].Attempt != 1 {
		t.Fatalf("released job's attempt %d, want 1 (refunded)", res.Claimed[0].Attempt)
	}
	// The first claims of the released job are gone: every fenced write of
	// them matches nothing.
	for name, write := range map[string]func() error{
		"fail":    func() error { return lease.FailChunked(ctx, db, second.Ref, codes.InvalidRecord, 3) },
		"succeed": func() error { return lease.SucceedChunked(ctx, db, second.Ref) },
		"fence":   func() error { return lease.FenceChunk(ctx, db, second.Ref) },
		"checkpoint": func() error {
			return lease.CheckpointChunk(ctx, db, second.Ref, lease.Checkpoint{NextPart: 1, NextRecord: 1},
				lease.Checkpoint{NextPart: 1, NextOffset: 11, NextRecord: 2}, 1, 0)
		},
	} {
		if err := write(); !errors.Is(err, lease.ErrLost) {
			t.Errorf("%s of a superseded claim: %v, want lease.ErrLost", name, err)
		}
	}
	// The live claim fails with its record number and dequeues the job.
	if err := lease.FailChunked(ctx, db, res.Claimed[0].Ref, codes.InvalidRecord, 1); err != nil {
		t.Fatal(err)
	}
	if got := status(t, db, ids[1]); got != pg.StatusFailed {
		t.Fatalf("status %s", got)
	}
	var queued int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM etl_chunked_job_queue WHERE job_record_id = $1`, ids[1]).Scan(&queued); err != nil || queued != 0 {
		t.Fatalf("queue rows %d (%v)", queued, err)
	}
}
