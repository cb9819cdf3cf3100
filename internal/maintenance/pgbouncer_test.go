package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mightyetl/mightyetl/internal/maintenance"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgbouncertest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
)

// The election and the fence hold through PgBouncer in transaction mode
// (MIGHTYETL_DATABASE_POOLER=transaction), with both maintainers' pools
// sharing one server connection: nothing lives in a session. One leads and
// prunes, the other is denied; the holder's row expires and the other
// takes it; a paused holder's batch under a lost term deletes nothing.
func TestElectionAndFencingThroughPgBouncerTransactionMode(t *testing.T) {
	t.Parallel()
	direct, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	bouncer := pgbouncertest.Start(t, pgbouncertest.Options{PoolSize: 1})
	viaBouncer := func() *pgxpool.Pool {
		t.Helper()
		p, err := pg.NewPool(ctx, bouncer.URL(url), pg.PoolOptions{MaxConns: 2, PinnedPlans: true,
			StatementTimeout: 10 * time.Second, Pooler: pg.PoolerTransaction})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	outboxRows(t, direct, 3, 1)
	a, am := newMaintainer(viaBouncer(), "worker-a-0006")
	b, bm := newMaintainer(viaBouncer(), "worker-b-0006")
	a.RunOnce(ctx)
	b.RunOnce(ctx)
	if !a.Leader() || b.Leader() || outboxCount(t, direct) != 1 {
		t.Fatalf("through PgBouncer: a %v, b %v, outbox %d", a.Leader(), b.Leader(), outboxCount(t, direct))
	}
	if testutil.ToFloat64(am.Runs.WithLabelValues(metrics.RunOK)) != 1 || election(bm, metrics.ElectionDenied) != 1 {
		t.Fatal("metrics through PgBouncer")
	}

	expire(t, direct) // a dies
	b.RunOnce(ctx)
	if !b.Leader() {
		t.Fatal("b did not take over from a")
	}
	a.RunOnce(ctx)
	if a.Leader() || election(am, metrics.ElectionLost) != 1 {
		t.Fatalf("a after b took over: leader %v", a.Leader())
	}

	// A holder paused between its election and its first batch, while its
	// term expired and another took the row: its batch deletes nothing.
	outboxRows(t, direct, 2, 0)
	expire(t, direct) // b dies
	bouncerPool := viaBouncer()
	c, cm := newMaintainer(bouncerPool, "worker-c-0006")
	maintenance.SetBeforePrune(c, func() {
		expire(t, direct)
		if _, held, err := pg.TakeLeadership(ctx, bouncerPool, maintenance.LeaderName, "worker-d-0006", time.Hour); err != nil || !held {
			t.Errorf("d takes c's expired row: %v %v", held, err)
		}
	})
	c.RunOnce(ctx)
	if c.Leader() || outboxCount(t, direct) != 3 || testutil.ToFloat64(cm.Runs.WithLabelValues(metrics.RunFenced)) != 1 {
		t.Fatalf("c's fenced run through PgBouncer: leader %v, outbox %d (want 3 left)", c.Leader(), outboxCount(t, direct))
	}
}
