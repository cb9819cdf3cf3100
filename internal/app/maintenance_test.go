package app

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// oldOutboxRows writes n unpublished outbox rows past the default window
// (40 days): what a deployment without NATS accumulates.
func oldOutboxRows(t *testing.T, db pg.DBTX, n int) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count, occurred_at)
		SELECT 'job_lifecycle', gen_random_uuid(), 'SUCCEEDED', 1, clock_timestamp() - interval '40 days'
		FROM generate_series(1, $1::int)`, n); err != nil {
		t.Fatal(err)
	}
}

func leaderRows(t *testing.T, db pg.DBTX, holder string) int {
	t.Helper()
	return pgtest.Count(t, db, `SELECT count(*) FROM etl_maintenance_leader WHERE holder_id = $1`, holder)
}

// A worker process with the defaults elects itself maintainer (it is
// alone), prunes the old outbox rows, exports the metrics, and resigns
// when it stops.
func TestWorkerProcessRunsMaintenanceByDefault(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	oldOutboxRows(t, pool, 3)
	cfg := testWorkerConfig(t, url, "")
	if !cfg.Maintenance.Enabled {
		t.Fatal("maintenance is not on by default")
	}
	p := newTestWorkerProcess(t, cfg)
	if p.Maintainer == nil {
		t.Fatal("no maintainer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the worker to lead and prune the outbox", func() bool {
		return leaderRows(t, pool, cfg.WorkerID) == 1 &&
			pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events WHERE job_status = 'SUCCEEDED'`) == 0
	})
	testwait.For(t, 30*time.Second, "the run's metrics", func() bool {
		return testutil.CollectAndCount(p.Registry, "mightyetl_maintenance_last_success_timestamp_seconds") == 1 &&
			gauge(t, p, "mightyetl_maintenance_last_success_timestamp_seconds") > 0
	})
	if got := gauge(t, p, "mightyetl_maintenance_leader"); got != 1 {
		t.Fatalf("leader gauge %v", got)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := leaderRows(t, pool, cfg.WorkerID); n != 0 {
		t.Fatal("the stopped worker did not resign")
	}
}

// MIGHTYETL_MAINTENANCE_ENABLED=false: no maintainer, so no election is
// ever attempted: through a whole run of the process (a job worked) the
// leader table stays empty, the old rows stay, and no maintenance metric
// is exported.
func TestWorkerProcessWithMaintenanceDisabledNeverElects(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDatabase(t)
	oldOutboxRows(t, pool, 3)
	cfg := testWorkerConfig(t, url, "")
	cfg.Maintenance.Enabled = false
	p := newTestWorkerProcess(t, cfg)
	if p.Maintainer != nil {
		t.Fatal("a maintainer while disabled")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	id := pgtest.InsertJobs(t, pool, pg.NewJob{})[0]
	testwait.For(t, 30*time.Second, "the worker to finish a job", func() bool {
		return pgtest.Count(t, pool, `SELECT count(*) FROM etl_job_records WHERE job_record_id = $1 AND job_status = 'SUCCEEDED'`, id) == 1
	})
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_maintenance_leader`); n != 0 {
		t.Fatalf("%d leader rows with maintenance disabled", n)
	}
	if n := pgtest.Count(t, pool, `SELECT count(*) FROM etl_outbox_events WHERE job_status = 'SUCCEEDED' AND occurred_at < clock_timestamp() - interval '30 days'`); n != 3 {
		t.Fatalf("%d of 3 old outbox rows left with maintenance disabled", n)
	}
	if n := testutil.CollectAndCount(p.Registry, "mightyetl_maintenance_elections_total", "mightyetl_maintenance_leader"); n != 0 {
		t.Fatalf("%d maintenance series exported while disabled", n)
	}
}

// gauge reads one unlabelled gauge of p's registry.
func gauge(t *testing.T, p *WorkerProcess, name string) float64 {
	t.Helper()
	fams, err := p.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}
