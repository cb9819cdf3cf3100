package intake

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/startstop"
	"github.com/mightyetl/mightyetl/internal/startstop/startstoptest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// The group commit follows the one start/stop shape.
func TestServiceStartStopStress(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	startstoptest.Stress(t, startstoptest.Built(func() (*Service, error) {
		return New(Options{DB: pool, PrincipalHashKey: testKey})
	}), 30*time.Second)
}

// Stop flushes a round still waiting for company at once, waits for its
// outcome, and then refuses submissions with the retryable
// ErrTargetUnavailable; a service never started refuses them too.
func TestStopFlushesTheWaitingRoundAndRefusesNewSubmissions(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	s, err := New(Options{DB: pool, PrincipalHashKey: testKey, GroupCommitWindow: time.Hour, GroupCommitMaxBatch: 10})
	if err != nil {
		t.Fatal(err)
	}
	req := func(key string) SubmitRequest {
		return SubmitRequest{Principal: "alice", IdempotencyKey: key, Body: []byte(body)}
	}
	if _, err := s.Submit(ctx, req("key-before-start-0001")); !errors.Is(err, ErrTargetUnavailable) {
		t.Fatalf("submit before Start: %v, want ErrTargetUnavailable", err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// One submission leads a round that would wait an hour for company.
	waiting := make(chan error, 1)
	go func() {
		_, err := s.Submit(ctx, req("key-waiting-000000001"))
		waiting <- err
	}()
	testwait.For(t, 30*time.Second, "the round's leader to wait", func() bool {
		s.batcher.mu.Lock()
		defer s.batcher.mu.Unlock()
		return len(s.batcher.pending) == 1 && s.batcher.wake != nil
	})
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	// Stop returned: the waiting round is committed already. (Its caller
	// may not have returned from Submit yet: Stop waits for outcomes, not
	// for callers, so the caller's answer is awaited below.)
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records`); n != 1 {
		t.Fatalf("%d jobs stored when Stop returned, want 1", n)
	}
	select {
	case err := <-waiting:
		if err != nil {
			t.Fatalf("the waiting submission: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting submission never returned")
	}
	if _, err := s.Submit(ctx, req("key-after-stop-000001")); !errors.Is(err, ErrTargetUnavailable) {
		t.Fatalf("submit after Stop: %v, want ErrTargetUnavailable", err)
	}
	if err := s.Start(ctx); !errors.Is(err, startstop.ErrStopped) {
		t.Fatalf("Start after Stop: %v, want ErrStopped", err)
	}
}
