package lease_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// gateKey is the advisory lock a gated claim waits for.
const gateKey = 11_000_018

// gatedClaimSQL is the product's claim statement with one change: its
// candidates' "now" waits for the advisory lock gateKey first. The statement
// has taken its snapshot by then, so whatever commits while it waits is
// newer than its snapshot and older than its locks: the window the claim's
// TID update is about, opened on demand instead of by timing.
func gatedClaimSQL(t *testing.T) string {
	t.Helper()
	const now = "WHERE q.claimable_at <= (SELECT clock_timestamp())"
	if strings.Count(lease.ClaimSQL, now) != 1 {
		t.Fatalf("claim statement without exactly one %q", now)
	}
	return strings.Replace(lease.ClaimSQL, now,
		"WHERE q.claimable_at <= (SELECT clock_timestamp() FROM (SELECT pg_advisory_xact_lock("+strconv.Itoa(gateKey)+")) AS gate)", 1)
}

// The claim updates the job rows it locked by the TID its lock returned, not
// by a second primary-key descent. A row that another transaction changed
// after the claim's snapshot and before its lock is locked at its newest
// version, which that snapshot cannot see: the TID update passes it by, so
// the job is not claimed in that round, and nothing of it is half-written
// (job row and queue row as the other transaction left them). The next
// claim takes it. A job changed in the same window into one that is not
// claimable (cancelled) is not taken either, as before.
func TestClaimSkipsARowChangedAfterItsSnapshot(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	ids := pgtest.InsertN(t, pool, 3, pg.NewJob{MaxAttempts: 3})
	changed, cancelled, untouched := ids[0], ids[1], ids[2]

	gate, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gate.Rollback(ctx) }()
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, gateKey); err != nil {
		t.Fatal(err)
	}

	gated := gatedClaimSQL(t)
	type outcome struct {
		res lease.ClaimResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := lease.ClaimJobsWith(ctx, pool, gated, lease.ClaimParams{OwnerID: "worker-gated-a", Limit: 10, LeaseDuration: time.Hour})
		done <- outcome{res, err}
	}()
	pgtest.WaitForLockWait(t, pool, gated[:40])

	// Committed after the claim's snapshot: a new version of a still
	// claimable job, and a cancellation.
	if _, err := pool.Exec(ctx, `UPDATE etl_job_records SET updated_at = clock_timestamp() WHERE job_record_id = $1`, changed); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.CancelJob(ctx, pool, pg.CancelParams{PrincipalScopeHash: pgtest.SHA("owner"), JobID: cancelled, CancellationKeyHash: pgtest.SHA("cancel-key")}); err != nil {
		t.Fatal(err)
	}
	var queuedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT claimable_at FROM etl_job_claim_queue WHERE job_record_id = $1`, changed).Scan(&queuedAt); err != nil {
		t.Fatal(err)
	}
	if err := gate.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if len(got.res.Claimed) != 1 || got.res.Claimed[0].JobID != untouched {
		t.Fatalf("claimed %+v, want only the untouched job %v", got.res.Claimed, untouched)
	}
	var st string
	var attempts int
	var owner *string
	if err := pool.QueryRow(ctx, `SELECT job_status, attempt_count, lease_owner_id FROM etl_job_records WHERE job_record_id = $1`, changed).
		Scan(&st, &attempts, &owner); err != nil {
		t.Fatal(err)
	}
	if st != "PENDING" || attempts != 0 || owner != nil {
		t.Fatalf("the changed job is %s, attempt %d, lease owner %v; want PENDING, 0, none", st, attempts, owner)
	}
	if at, ok := queueRow(t, pool, changed); !ok || !at.Equal(queuedAt) {
		t.Fatalf("the changed job's queue row %v at %v, want unchanged at %v", ok, at, queuedAt)
	}
	if s := status(t, pool, cancelled); s != "CANCELLED" {
		t.Fatalf("the cancelled job is %s", s)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)

	next := claim(t, pool, "worker-gated-b", 10, time.Hour)
	if len(next.Claimed) != 1 || next.Claimed[0].JobID != changed || next.Claimed[0].Attempt != 1 {
		t.Fatalf("next claim %+v, want the changed job at attempt 1", next.Claimed)
	}
}
