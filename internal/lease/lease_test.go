package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

func claim(t *testing.T, db pg.DBTX, owner string, limit int, d time.Duration) lease.ClaimResult {
	t.Helper()
	res, err := lease.ClaimJobs(context.Background(), db, lease.ClaimParams{OwnerID: owner, Limit: limit, LeaseDuration: d})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func status(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) string {
	t.Helper()
	s, err := lease.InspectLost(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return s.Status
}

func TestClaimTakesOldestFirstWithFreshLeases(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ids := pgtest.InsertN(t, pool, 5, pg.NewJob{MaxAttempts: 3})
	res := claim(t, pool, "worker-aaaa", 3, time.Minute)
	if len(res.Claimed) != 3 {
		t.Fatalf("claimed %d, want 3", len(res.Claimed))
	}
	seenTokens := map[int64]bool{}
	for i, c := range res.Claimed {
		if c.JobID != ids[i] {
			t.Errorf("claim %d = %v, want oldest-first %v", i, c.JobID, ids[i])
		}
		if c.Attempt != 1 || c.MaxAttempts != 3 || c.OwnerID != "worker-aaaa" || c.ClaimID == uuid.Nil {
			t.Errorf("claim %d: %+v", i, c)
		}
		if seenTokens[c.FencingToken] {
			t.Errorf("duplicate fencing token %d", c.FencingToken)
		}
		seenTokens[c.FencingToken] = true
		if c.Payload == "" || c.RequestDigest != pgtest.SHA(c.Payload) {
			t.Errorf("claim %d payload/digest mismatch", i)
		}
	}
	if got := len(claim(t, pool, "worker-bbbb", 10, time.Minute).Claimed); got != 2 {
		t.Fatalf("second claimer got %d, want the 2 left", got)
	}
	if got := len(claim(t, pool, "worker-cccc", 10, time.Minute).Claimed); got != 0 {
		t.Fatalf("third claimer got %d, want 0 while leases are live", got)
	}
}

func TestExpiredLeaseIsReclaimedWithGreaterTokenAndOldTokenIsFenced(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ids := pgtest.InsertN(t, pool, 1, pg.NewJob{MaxAttempts: 3})
	old := claim(t, pool, "worker-old1", 1, time.Minute).Claimed[0]
	pgtest.ExpireLease(t, pool, ids[0], time.Millisecond)
	// The expired lease cannot be renewed or written, even before a reclaim.
	ren, err := lease.Renew(context.Background(), pool, old.OwnerID, []lease.Ref{old.Ref}, time.Minute)
	if err != nil || ren[0].Renewed {
		t.Fatalf("renew of expired lease: %+v %v", ren, err)
	}
	next := claim(t, pool, "worker-new1", 1, time.Minute).Claimed
	if len(next) != 1 || next[0].FencingToken <= old.FencingToken || next[0].Attempt != 2 {
		t.Fatalf("reclaim: %+v (old token %d)", next, old.FencingToken)
	}
	if next[0].PickupDelay < 0 {
		t.Fatalf("negative pickup delay")
	}
	ctx := context.Background()
	if err := lease.Retry(ctx, pool, old.Ref, 0); !errors.Is(err, lease.ErrLost) {
		t.Errorf("old retry: %v", err)
	}
	if err := lease.Fail(ctx, pool, old.Ref, codes.TargetFailure); !errors.Is(err, lease.ErrLost) {
		t.Errorf("old fail: %v", err)
	}
	if err := lease.Release(ctx, pool, old.Ref); !errors.Is(err, lease.ErrLost) {
		t.Errorf("old release: %v", err)
	}
	err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := pgtest.SucceedOne(ctx, tx, old.Ref)
		return err
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Errorf("old succeed: %v", err)
	}
	ren, err = lease.Renew(ctx, pool, old.OwnerID, []lease.Ref{old.Ref}, time.Minute)
	if err != nil || ren[0].Renewed {
		t.Fatalf("old token renewed the successor: %+v %v", ren, err)
	}
	// A forged ref with the old claim id but the new owner is still fenced.
	forged := lease.Ref{JobID: old.JobID, ClaimID: old.ClaimID, OwnerID: next[0].OwnerID}
	ren, err = lease.Renew(ctx, pool, forged.OwnerID, []lease.Ref{forged}, time.Minute)
	if err != nil || ren[0].Renewed {
		t.Fatalf("forged renew succeeded: %+v %v", ren, err)
	}
	if s := status(t, pool, ids[0]); s != pg.StatusRunning {
		t.Fatalf("status %s", s)
	}
	err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := pgtest.SucceedOne(ctx, tx, next[0].Ref)
		return err
	})
	if err != nil {
		t.Fatalf("successor succeed: %v", err)
	}
	if s := status(t, pool, ids[0]); s != pg.StatusSucceeded {
		t.Fatalf("status %s", s)
	}
}

func TestExhaustedAtClaimTime(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ids := pgtest.InsertN(t, pool, 1, pg.NewJob{MaxAttempts: 1})
	claim(t, pool, "worker-aaaa", 1, time.Minute)
	pgtest.ExpireLease(t, pool, ids[0], time.Millisecond)
	res := claim(t, pool, "worker-bbbb", 5, time.Minute)
	if len(res.Claimed) != 0 || res.Exhausted != 1 {
		t.Fatalf("claim after exhaustion: %+v", res)
	}
	var st, code string
	var payloadNull bool
	if err := pool.QueryRow(context.Background(), `SELECT job_status, failure_code, request_payload IS NULL FROM etl_job_records WHERE job_record_id=$1`, ids[0]).Scan(&st, &code, &payloadNull); err != nil {
		t.Fatal(err)
	}
	if st != "FAILED" || code != codes.WorkerAttemptsExhausted || !payloadNull {
		t.Fatalf("got %s %s payloadNull=%v", st, code, payloadNull)
	}
	var events int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM etl_outbox_events WHERE job_record_id=$1 AND event_kind='job_lifecycle' AND job_status='FAILED'`, ids[0]).Scan(&events); err != nil || events != 1 {
		t.Fatalf("lifecycle events %d %v", events, err)
	}
}

func TestRetryBackoffUsesDatabaseClock(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ids := pgtest.InsertN(t, pool, 1, pg.NewJob{MaxAttempts: 3})
	c := claim(t, pool, "worker-aaaa", 1, time.Minute).Claimed[0]
	if err := lease.Retry(context.Background(), pool, c.Ref, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, pool, "worker-bbbb", 1, time.Minute).Claimed; len(got) != 0 {
		t.Fatal("retried job claimable before available_at")
	}
	// Move available_at to the past by the database clock: claimable again.
	pgtest.MakeAvailable(t, pool, ids[0], time.Second)
	got := claim(t, pool, "worker-bbbb", 1, time.Minute).Claimed
	if len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("reclaim after backoff: %+v", got)
	}
}

func TestReleaseDoesNotChargeAttempt(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	pgtest.InsertN(t, pool, 1, pg.NewJob{MaxAttempts: 2})
	c := claim(t, pool, "worker-aaaa", 1, time.Minute).Claimed[0]
	if err := lease.Release(context.Background(), pool, c.Ref); err != nil {
		t.Fatal(err)
	}
	got := claim(t, pool, "worker-bbbb", 1, time.Minute).Claimed
	if len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("after release: %+v", got)
	}
}

func TestRenewExtendsOnlyLiveExactLeases(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	pgtest.InsertN(t, pool, 3, pg.NewJob{MaxAttempts: 3})
	cs := claim(t, pool, "worker-aaaa", 3, 2*time.Second).Claimed
	ctx := context.Background()
	// Finish one and fail another: only the third may renew.
	if err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error { _, err := pgtest.SucceedOne(ctx, tx, cs[0].Ref); return err }); err != nil {
		t.Fatal(err)
	}
	if err := lease.Fail(ctx, pool, cs[1].Ref, codes.TargetFailure); err != nil {
		t.Fatal(err)
	}
	refs := []lease.Ref{cs[0].Ref, cs[1].Ref, cs[2].Ref}
	ren, err := lease.Renew(ctx, pool, "worker-aaaa", refs, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ren[0].Renewed || ren[1].Renewed || !ren[2].Renewed {
		t.Fatalf("renewals: %+v", ren)
	}
	if !ren[2].ExpiresAt.After(cs[2].ExpiresAt.Add(30 * time.Minute)) {
		t.Fatalf("expiry not extended: %v -> %v", cs[2].ExpiresAt, ren[2].ExpiresAt)
	}
	if s := status(t, pool, cs[0].JobID); s != pg.StatusSucceeded {
		t.Fatalf("renew revived a finished job: %s", s)
	}
	if s := status(t, pool, cs[1].JobID); s != pg.StatusFailed {
		t.Fatalf("renew revived a failed job: %s", s)
	}
	// A shorter renewal never shortens the lease.
	ren2, err := lease.Renew(ctx, pool, "worker-aaaa", refs[2:], time.Second)
	if err != nil || !ren2[0].Renewed || ren2[0].ExpiresAt.Before(ren[2].ExpiresAt) {
		t.Fatalf("renewal shortened the lease: %+v %v", ren2, err)
	}
}

func TestSucceedManyDecidesEachJobByItsOwnLease(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ids := pgtest.InsertN(t, pool, 3, pg.NewJob{MaxAttempts: 3})
	cs := claim(t, pool, "worker-aaaa", 3, time.Minute).Claimed
	pgtest.ExpireLease(t, pool, ids[1], time.Millisecond)
	ctx := context.Background()
	var won []lease.Won
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		won, err = lease.Succeed(ctx, tx, "worker-aaaa", []lease.Ref{cs[0].Ref, cs[1].Ref, cs[2].Ref})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(won) != 2 {
		t.Fatalf("won %d, want 2", len(won))
	}
	for _, w := range won {
		if w.JobID == ids[1] {
			t.Fatal("expired lease won")
		}
	}
}

// A worker can present only its own claims: a batch with another owner's
// claim is refused before any statement runs, and a forged ref naming the
// victim's owner still needs the victim's private claim id.
func TestRenewAndSucceedRefuseAnotherOwnersClaim(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	pgtest.InsertN(t, pool, 2, pg.NewJob{MaxAttempts: 3})
	ctx := context.Background()
	mine := claim(t, pool, "worker-mine", 1, time.Minute).Claimed[0]
	theirs := claim(t, pool, "worker-theirs", 1, time.Minute).Claimed[0]
	if _, err := lease.Renew(ctx, pool, "worker-mine", []lease.Ref{mine.Ref, theirs.Ref}, time.Hour); err == nil {
		t.Fatal("renew accepted another owner's claim")
	}
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := lease.Succeed(ctx, tx, "worker-mine", []lease.Ref{theirs.Ref})
		return err
	})
	if err == nil {
		t.Fatal("succeed accepted another owner's claim")
	}
	forged := lease.Ref{JobID: theirs.JobID, ClaimID: uuid.New(), OwnerID: theirs.OwnerID}
	ren, err := lease.Renew(ctx, pool, forged.OwnerID, []lease.Ref{forged}, time.Hour)
	if err != nil || ren[0].Renewed {
		t.Fatalf("a guessed claim id renewed: %+v %v", ren, err)
	}
}

// A claim returns its jobs oldest eligible first, each with every column of
// its row decoded (ids, token, expiry, attempts, payload, digest, the
// traceparent only where one was stored) and its pickup delay by the
// database clock.
func TestClaimReturnsOldestFirstWithEveryField(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ids := pgtest.InsertJobs(t, pool,
		pg.NewJob{Payload: `{"n":0}`, MaxAttempts: 2},
		pg.NewJob{Payload: `{"n":1}`, MaxAttempts: 3, SubmitTraceparent: traceparent},
		pg.NewJob{Payload: `{"n":2}`, MaxAttempts: 4})
	// Job 2 became available first, then job 0, then job 1.
	pgtest.MakeAvailable(t, pool, ids[2], 3*time.Hour)
	pgtest.MakeAvailable(t, pool, ids[0], 2*time.Hour)
	pgtest.MakeAvailable(t, pool, ids[1], time.Hour)
	res := claim(t, pool, "worker-order", 10, time.Minute)
	if len(res.Claimed) != 3 {
		t.Fatalf("claimed %d, want 3", len(res.Claimed))
	}
	want := []struct {
		id          uuid.UUID
		payload     string
		maxAttempts int
		traceparent string
		ago         time.Duration
	}{
		{ids[2], `{"n":2}`, 4, "", 3 * time.Hour},
		{ids[0], `{"n":0}`, 2, "", 2 * time.Hour},
		{ids[1], `{"n":1}`, 3, traceparent, time.Hour},
	}
	tokens := map[int64]bool{}
	for i, w := range want {
		c := res.Claimed[i]
		if c.JobID != w.id || c.Payload != w.payload || c.RequestDigest != pgtest.SHA(w.payload) ||
			c.MaxAttempts != w.maxAttempts || c.Attempt != 1 || c.SubmitTraceparent != w.traceparent ||
			c.OwnerID != "worker-order" || c.ClaimID == uuid.Nil || c.Kind != pgtest.DefaultFixtureKind {
			t.Fatalf("claim %d: %+v, want job %s %+v", i, c, w.id, w)
		}
		if c.PickupDelay < w.ago || c.PickupDelay > w.ago+time.Minute {
			t.Fatalf("claim %d: pickup delay %v, want about %v", i, c.PickupDelay, w.ago)
		}
		if time.Until(c.ExpiresAt) <= 0 || time.Until(c.ExpiresAt) > 2*time.Minute {
			t.Fatalf("claim %d: expires at %v", i, c.ExpiresAt)
		}
		if tokens[c.FencingToken] {
			t.Fatalf("claim %d: fencing token %d repeated", i, c.FencingToken)
		}
		tokens[c.FencingToken] = true
	}
}
