package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// Renewal never waits on a job row another transaction holds (issue 12,
// defect 4): the worker's own finish transaction locks its won rows until it
// commits. The held row comes back busy (neither renewed nor lost), the
// others are renewed, and once the holder commits a terminal state the
// lease is reported lost, not busy.
func TestRenewSkipsLockedRowsAndReportsThemBusy(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	pgtest.InsertN(t, pool, 2, pg.NewJob{MaxAttempts: 3})
	res := claim(t, pool, "worker-renew-locked", 2, time.Minute)
	if len(res.Claimed) != 2 {
		t.Fatalf("claimed %d", len(res.Claimed))
	}
	held, free := res.Claimed[0], res.Claimed[1]
	refs := []lease.Ref{held.Ref, free.Ref}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The holder: a fenced success in an open transaction, as a completer's.
	if _, err := pgtest.SucceedOne(ctx, tx, held.Ref); err != nil {
		t.Fatal(err)
	}

	// Bounded only so that a regression fails instead of hanging: a renewal
	// that waited on the held row would wait until this deadline.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := lease.Renew(rctx, pool, "worker-renew-locked", refs, 2*time.Minute)
	if err != nil {
		t.Fatalf("renew while a row is held: %v", err)
	}
	if out[0].Renewed || !out[0].Busy {
		t.Fatalf("held row: renewed %v busy %v, want busy", out[0].Renewed, out[0].Busy)
	}
	if !out[1].Renewed || out[1].Busy || !out[1].ExpiresAt.After(free.ExpiresAt) {
		t.Fatalf("free row: %+v, want renewed past %v", out[1], free.ExpiresAt)
	}
	var heldExpiry time.Time
	if err := pool.QueryRow(ctx, `SELECT lease_expires_at FROM etl_job_records WHERE job_record_id = $1`, held.JobID).Scan(&heldExpiry); err != nil {
		t.Fatal(err)
	}
	if !heldExpiry.Equal(held.ExpiresAt) {
		t.Fatalf("held row's lease moved to %v", heldExpiry)
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	out, err = lease.Renew(ctx, pool, "worker-renew-locked", refs, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Renewed || out[0].Busy {
		t.Fatalf("succeeded job: renewed %v busy %v, want lost", out[0].Renewed, out[0].Busy)
	}
	if !out[1].Renewed {
		t.Fatal("free row not renewed again")
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}
