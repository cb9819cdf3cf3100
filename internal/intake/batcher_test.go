package intake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/codes"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// pausedDB passes every statement through to a real pool. Armed, it runs
// before once, ahead of the nth Query from then on: a pause point between
// two statements of one flush, where the test changes the database the way
// a concurrent process would. The database still decides everything.
type pausedDB struct {
	*pgxpool.Pool
	mu      sync.Mutex
	queries int
	at      int
	before  func(ctx context.Context)
}

func (d *pausedDB) arm(at int, before func(ctx context.Context)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queries, d.at, d.before = 0, at, before
}

func (d *pausedDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	d.mu.Lock()
	var before func(context.Context)
	if d.before != nil {
		d.queries++
		if d.queries == d.at {
			before, d.before = d.before, nil
		}
	}
	d.mu.Unlock()
	if before != nil {
		before(ctx)
	}
	return d.Pool.Query(ctx, sql, args...)
}

// TestFlushRetryAfterVanishedConflictKeepsCreated: one flush carries a new
// key (B), a key whose job is pruned between the insert and the lookup of
// existing rows (A), and a key of a live job (C). The insert commits B on
// its own, the lookup misses A, and the flush retries. B was created by this
// submission and must not come back as a replay; A's job is gone, so the
// submission makes a new one; C stays a genuine replay. Every key ends with
// exactly one job, each with its one job_available event.
func TestFlushRetryAfterVanishedConflictKeepsCreated(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{MaxConns: 16})
	ctx := context.Background()
	setup, err := New(Options{DB: pool, PrincipalHashKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	startService(t, setup)
	const keyA, keyB, keyC = "key-vanishing-00000001", "key-new-0000000000001", "key-live-000000000001"
	req := func(key string) SubmitRequest {
		return SubmitRequest{Principal: "alice", IdempotencyKey: key, Body: []byte(body)}
	}
	a, err := setup.Submit(ctx, req(keyA))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Cancel(ctx, CancelRequest{Principal: "alice", JobID: a.Job.JobID, IdempotencyKey: "cancel-key-000000001"}); err != nil {
		t.Fatal(err)
	}
	c, err := setup.Submit(ctx, req(keyC))
	if err != nil {
		t.Fatal(err)
	}

	db := &pausedDB{Pool: pool}
	s, err := New(Options{DB: db, PrincipalHashKey: testKey, GroupCommitWindow: time.Hour, GroupCommitMaxBatch: 3})
	if err != nil {
		t.Fatal(err)
	}
	startService(t, s)
	pruned := make(chan int64, 1)
	// Statement 1 of the flush is the insert, statement 2 the lookup of the
	// rows that already held a key: prune A (CANCELLED) in between.
	db.arm(2, func(ctx context.Context) {
		n, err := pg.PruneTerminalJobs(ctx, pool, time.Microsecond, 10)
		if err != nil {
			t.Error(err)
		}
		pruned <- n
	})
	keys := []string{keyA, keyB, keyC}
	results := make([]SubmitResult, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() { results[i], errs[i] = s.Submit(ctx, req(key)) })
	}
	wg.Wait()
	select {
	case n := <-pruned:
		if n != 1 {
			t.Fatalf("pruned %d jobs, want A alone", n)
		}
	default:
		t.Fatal("the flush never reached its lookup of existing rows")
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", keys[i], err)
		}
	}
	resA, resB, resC := results[0], results[1], results[2]
	if resB.Replayed {
		t.Errorf("B: the job this submission created is reported as a replay")
	}
	if resA.Replayed || resA.Job.JobID == a.Job.JobID || resA.Job.Status != pg.StatusPending {
		t.Errorf("A after its job was pruned: replayed %v, status %s, same job %v",
			resA.Replayed, resA.Job.Status, resA.Job.JobID == a.Job.JobID)
	}
	if !resC.Replayed || resC.Job.JobID != c.Job.JobID {
		t.Errorf("C: replayed %v, same job %v", resC.Replayed, resC.Job.JobID == c.Job.JobID)
	}
	scope := auth.ScopeHash(testKey, "alice")
	for i, res := range results {
		var jobs, events int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records j
			WHERE j.principal_scope_hash = decode($1, 'hex') AND j.submission_key_hash = decode($2, 'hex')
			  AND j.job_record_id = $3 AND j.job_status = 'PENDING' AND j.request_payload IS NOT NULL`,
			scope, SubmissionKeyHash(scope, keys[i]), res.Job.JobID).Scan(&jobs); err != nil || jobs != 1 {
			t.Errorf("%s: %d pending jobs under the key with the reported id (%v)", keys[i], jobs, err)
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_outbox_job_events
			WHERE event_kind = 'job_available' AND job_record_id = $1`, res.Job.JobID).Scan(&events); err != nil || events != 1 {
			t.Errorf("%s: %d job_available events (%v)", keys[i], events, err)
		}
	}
	var total int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM etl_job_records`).Scan(&total); err != nil || total != 3 {
		t.Errorf("%d jobs, want 3 (%v)", total, err)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}

// TestSubmitReportsSettledOutcomeOverCancel: a caller whose context ended
// but who leads its round still flushes it (the round's other callers rely
// on that), so its job commits; once the outcome is there, Submit reports
// it instead of the cancellation, so the caller is not told to retry a job
// it just created (the retry would come back as a replay). Before the fix
// each call picked at random between the two.
func TestSubmitReportsSettledOutcomeOverCancel(t *testing.T) {
	t.Parallel()
	s, db := newService(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const n = 24
	for i := range n {
		res, err := s.Submit(ctx, SubmitRequest{Principal: "alice", IdempotencyKey: fmt.Sprintf("key-cancelled-%06d", i), Body: []byte(body)})
		if err != nil || res.Replayed {
			t.Fatalf("submission %d with its job committed: replayed %v, %v", i, res.Replayed, err)
		}
	}
	var jobs int
	if err := db.QueryRow(context.Background(), "SELECT count(*) FROM etl_job_records").Scan(&jobs); err != nil || jobs != n {
		t.Errorf("jobs %d %v", jobs, err)
	}
}

// A conflicting row that kept vanishing until the flush gave up is answered
// as retryable (503 etl_target_unavailable: the same key and body will
// succeed), never as an internal error or an absent resource.
func TestVanishedConflictIsRetryable(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("insert jobs: %w", pg.ErrConflictVanished),
		fmt.Errorf("read ledger entry: %w", pg.ErrConflictVanished),
	} {
		if got := CodeOf(storeError(err)); got != codes.TargetUnavailable {
			t.Errorf("%v: code %s, want %s", err, got, codes.TargetUnavailable)
		}
		if errors.Is(err, pg.ErrNotFound) {
			t.Errorf("%v reads as not found", err)
		}
	}
}

// A caller that gives up on its context while its round is being flushed
// returns at once, and reads nothing the flush is still writing (under
// -race this failed: Submit read the round's group size for its trace span
// while the flush wrote it). The round still commits both jobs.
func TestCallerLeavingMidFlushReadsNothingOfTheRound(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	db := &pausedDB{Pool: pool}
	s, err := New(Options{DB: db, PrincipalHashKey: testKey, GroupCommitWindow: time.Hour, GroupCommitMaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	startService(t, s)
	inFlush, release := make(chan struct{}), make(chan struct{})
	db.arm(1, func(context.Context) { close(inFlush); <-release })
	req := func(key string) SubmitRequest {
		return SubmitRequest{Principal: "alice", IdempotencyKey: key, Body: []byte(body)}
	}
	leader := make(chan error, 1)
	go func() {
		_, err := s.Submit(context.Background(), req("key-leader-000000001"))
		leader <- err
	}()
	// The leader must be queued first, so the caller that leaves is not the
	// one running the flush.
	testwait.For(t, 30*time.Second, "the leader queued", func() bool {
		s.batcher.mu.Lock()
		defer s.batcher.mu.Unlock()
		return len(s.batcher.pending) == 1
	})
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := s.Submit(ctx, req("key-leaving-00000001"))
		left <- err
	}()
	select {
	case <-inFlush: // both are in the round (it flushes only when full)
	case <-time.After(30 * time.Second):
		t.Fatal("the round did not flush")
	}
	// Cancel and release together: nothing orders the caller's return after
	// the flush's writes, so under -race any read of the round's state by a
	// caller that left is reported.
	cancel()
	close(release)
	select {
	case err := <-left:
		if err != nil && CodeOf(err) != codes.TargetUnavailable {
			t.Errorf("caller that left: %v, want its outcome or %s", err, codes.TargetUnavailable)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the caller that gave up did not return")
	}
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	var jobs int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM etl_job_records").Scan(&jobs); err != nil || jobs != 2 {
		t.Fatalf("jobs %d %v, want both committed", jobs, err)
	}
}
