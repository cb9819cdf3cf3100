package lease_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
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

// waitForAdvisoryWait waits until a backend of this test's database waits
// for the advisory lock gateKey (a bigint key below 2^32: classid 0, objid
// the key, objsubid 1).
func waitForAdvisoryWait(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	testwait.For(t, 30*time.Second, "the claim to wait at its gate", func() bool {
		var n int
		if err := pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			 WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()
			   AND l.classid = 0 AND l.objid = $1 AND l.objsubid = 1`, gateKey).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
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

	type row struct {
		kind int
		id   [16]byte
	}
	gated := gatedClaimSQL(t)
	done := make(chan error, 1)
	var rows []row
	go func() {
		r, err := pool.Query(ctx, gated, 10, "worker-gated-a", time.Hour.Microseconds())
		if err != nil {
			done <- err
			return
		}
		defer r.Close()
		for r.Next() {
			vals, err := r.Values()
			if err != nil {
				done <- err
				return
			}
			rows = append(rows, row{kind: int(vals[0].(int32)), id: vals[1].([16]byte)})
		}
		done <- r.Err()
	}()
	waitForAdvisoryWait(t, pool)

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
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var claimed, candidates int
	for _, r := range rows {
		switch r.kind {
		case 1:
			claimed++
			if r.id != untouched {
				t.Fatalf("claimed %v, want only the untouched job %v", uuid.UUID(r.id), untouched)
			}
		case 3:
			candidates++
		}
	}
	// The cancelled job's queue row went with its cancellation: the claim's
	// lock found it deleted and passed it by.
	if claimed != 1 || candidates != 2 {
		t.Fatalf("claimed %d of %d candidates, want 1 of 2", claimed, candidates)
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
