package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/mightyetl/mightyetl/internal/maintenance"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// newMaintainer is a Maintainer named holder on pool with a private metric
// set, an hour's interval (only RunOnce calls move it) and the outbox
// window of a week; the other windows are the defaults.
func newMaintainer(pool *pgxpool.Pool, holder string) (*maintenance.Maintainer, *metrics.Maintenance) {
	m := metrics.NewMaintenance(nil)
	w := maintenance.DefaultWindows()
	w.Outbox = 168 * time.Hour
	return maintenance.New(pool, maintenance.Config{Holder: holder, Interval: time.Hour, Windows: w, Batch: 2, Metrics: m}), m
}

func holder(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var h string
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(max(holder_id), '') FROM etl_maintenance_leader
		WHERE leader_name = $1`, maintenance.LeaderName).Scan(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// expire moves the leader row's expiry into the past (database clock): its
// holder died or paused past its term.
func expire(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE etl_maintenance_leader
		SET expires_at = clock_timestamp() - interval '1 millisecond'`); err != nil {
		t.Fatal(err)
	}
}

// outboxRows writes old (8 days, past the week's window) and young (an
// hour) unpublished lifecycle rows.
func outboxRows(t *testing.T, pool *pgxpool.Pool, old, young int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, occurred_at)
		SELECT 'job_lifecycle', gen_random_uuid(), 'SUCCEEDED', 1,
		       clock_timestamp() - CASE WHEN g <= $1::int THEN interval '8 days' ELSE interval '1 hour' END
		FROM generate_series(1, $1::int + $2::int) g`, old, young); err != nil {
		t.Fatal(err)
	}
}

func outboxCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	return pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events WHERE event_kind = 'job_lifecycle'`)
}

func election(m *metrics.Maintenance, outcome string) float64 {
	return testutil.ToFloat64(m.Elections.WithLabelValues(outcome))
}

// Two maintainers on one database: the first to attempt leads and prunes,
// the second is denied at every attempt while the first renews; the
// metrics say so.
func TestOnlyOneOfTwoMaintainersLeads(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	outboxRows(t, pool, 3, 2)
	a, am := newMaintainer(pool, "worker-a-0001")
	b, bm := newMaintainer(pool, "worker-b-0001")
	for range 2 {
		a.RunOnce(ctx)
		b.RunOnce(ctx)
		if !a.Leader() || b.Leader() || holder(t, pool) != "worker-a-0001" {
			t.Fatalf("leaders: a %v, b %v, row %q", a.Leader(), b.Leader(), holder(t, pool))
		}
	}
	if election(am, metrics.ElectionGained) != 1 || election(am, metrics.ElectionRenewed) != 1 || election(bm, metrics.ElectionDenied) != 2 ||
		election(bm, metrics.ElectionGained) != 0 {
		t.Fatalf("elections: a gained %v renewed %v, b denied %v gained %v", election(am, metrics.ElectionGained),
			election(am, metrics.ElectionRenewed), election(bm, metrics.ElectionDenied), election(bm, metrics.ElectionGained))
	}
	if testutil.ToFloat64(am.Leader) != 1 || testutil.ToFloat64(bm.Leader) != 0 {
		t.Fatal("leader gauges")
	}
	// One run within the interval: the second attempt renewed only.
	if got := testutil.ToFloat64(am.Runs.WithLabelValues(metrics.RunOK)); got != 1 {
		t.Fatalf("a's runs: %v, want 1", got)
	}
	if testutil.ToFloat64(bm.Runs.WithLabelValues(metrics.RunOK)) != 0 || testutil.ToFloat64(bm.LastSuccess) != 0 {
		t.Fatal("b ran retention")
	}
	if testutil.ToFloat64(am.LastSuccess) <= 0 {
		t.Fatal("a's last success not set")
	}
	if got := testutil.ToFloat64(am.Pruned.WithLabelValues(metrics.PruneOutbox)); got != 3 || outboxCount(t, pool) != 2 {
		t.Fatalf("a pruned %v outbox rows, %d left; want 3 and 2", got, outboxCount(t, pool))
	}
}

// The holder dies without resigning (its row expires on the database
// clock): the other maintainer takes over at its next attempt and prunes;
// the old holder, back, finds its term gone at its next attempt.
func TestTheOtherMaintainerTakesOverWhenTheHolderDies(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	a, am := newMaintainer(pool, "worker-a-0002")
	b, bm := newMaintainer(pool, "worker-b-0002")
	a.RunOnce(ctx)
	b.RunOnce(ctx)
	if !a.Leader() || b.Leader() {
		t.Fatal("a should lead")
	}
	outboxRows(t, pool, 4, 1)
	expire(t, pool) // a dies
	b.RunOnce(ctx)
	if !b.Leader() || holder(t, pool) != "worker-b-0002" {
		t.Fatalf("b after a's term expired: leader %v, row %q", b.Leader(), holder(t, pool))
	}
	if got := testutil.ToFloat64(bm.Pruned.WithLabelValues(metrics.PruneOutbox)); got != 4 || outboxCount(t, pool) != 1 {
		t.Fatalf("b pruned %v, %d left", got, outboxCount(t, pool))
	}
	a.RunOnce(ctx)
	if a.Leader() || election(am, metrics.ElectionLost) != 1 || testutil.ToFloat64(am.Leader) != 0 {
		t.Fatalf("a after b took over: leader %v, lost %v", a.Leader(), election(am, metrics.ElectionLost))
	}
}

// A stopped maintainer resigns: the next attempt of another takes the row
// at once, before the term would have expired.
func TestAStoppedMaintainerHandsOverAtTheNextAttempt(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	a, _ := newMaintainer(pool, "worker-a-0003")
	b, _ := newMaintainer(pool, "worker-b-0003")
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "a to lead", a.Leader)
	b.RunOnce(ctx)
	if b.Leader() {
		t.Fatal("b leads while a runs")
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if a.Leader() || holder(t, pool) != "" {
		t.Fatalf("after a's stop: leader %v, row %q", a.Leader(), holder(t, pool))
	}
	b.RunOnce(ctx)
	if !b.Leader() {
		t.Fatal("b did not take the resigned row")
	}
}

// A holder that pauses after its election, past its term, while another
// process takes the row: its run's first batch finds the term over,
// deletes nothing, and the run ends fenced.
func TestAPausedHolderWhoseTermWasTakenDeletesNothing(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t)
	ctx := context.Background()
	outboxRows(t, pool, 5, 0)
	if _, err := pool.Exec(ctx, `INSERT INTO etl_job_claim_queue (job_record_id, claimable_at) VALUES (gen_random_uuid(), clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	a, am := newMaintainer(pool, "worker-a-0004")
	maintenance.SetBeforePrune(a, func() {
		expire(t, pool)
		if _, held, err := pg.TakeLeadership(ctx, pool, maintenance.LeaderName, "worker-b-0004", time.Hour); err != nil || !held {
			t.Errorf("b takes the expired row: %v %v", held, err)
		}
	})
	a.RunOnce(ctx)
	if a.Leader() || holder(t, pool) != "worker-b-0004" {
		t.Fatalf("a after its fenced run: leader %v, row %q", a.Leader(), holder(t, pool))
	}
	if outboxCount(t, pool) != 5 || pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_claim_queue`) != 1 {
		t.Fatal("the paused holder deleted rows")
	}
	if testutil.ToFloat64(am.Runs.WithLabelValues(metrics.RunFenced)) != 1 || testutil.ToFloat64(am.Runs.WithLabelValues(metrics.RunOK)) != 0 ||
		testutil.ToFloat64(am.LastSuccess) != 0 || testutil.ToFloat64(am.Leader) != 0 {
		t.Fatal("metrics of the fenced run")
	}
	for _, k := range metrics.PruneKinds {
		if got := testutil.ToFloat64(am.Pruned.WithLabelValues(k)); got != 0 {
			t.Fatalf("pruned %v %s", got, k)
		}
	}
}

// A schema without the leader table (a rollback to 00021 while new
// binaries run) elects nobody and deletes nothing; the attempt counts as
// an error.
func TestNoLeaderTableMeansNoRetention(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDatabase(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	if err := pg.MigrateTo(ctx, pool, 21); err != nil {
		t.Fatal(err)
	}
	outboxRows(t, pool, 2, 0)
	a, am := newMaintainer(pool, "worker-a-0005")
	a.RunOnce(ctx)
	if a.Leader() || election(am, metrics.ElectionError) != 1 || outboxCount(t, pool) != 2 {
		t.Fatalf("on schema 21: leader %v, errors %v, outbox %d", a.Leader(), election(am, metrics.ElectionError), outboxCount(t, pool))
	}
}

// Every part of retention has its kind label, and no label names a part
// that does not exist: the label set is the fixed metrics.PruneKinds.
func TestEveryPruneKindIsAMetricLabel(t *testing.T) {
	t.Parallel()
	if len(pg.PruneKinds) != len(metrics.PruneKinds) {
		t.Fatalf("pg kinds %v, metric labels %v", pg.PruneKinds, metrics.PruneKinds)
	}
	for i, k := range pg.PruneKinds {
		if string(k) != metrics.PruneKinds[i] {
			t.Fatalf("pg kinds %v, metric labels %v", pg.PruneKinds, metrics.PruneKinds)
		}
	}
}
