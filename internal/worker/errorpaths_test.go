package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testwait"
	"github.com/mightyetl/mightyetl/internal/worker"
)

// A finish that the target refuses deterministically ends the job FAILED
// etl_target_failure at once, by a fenced write, on the attempt it happened;
// the jobs that shared its finish group still succeed (issue 12, defect 2).
// Before, the computed result was retried 4 times, thrown away, and the job
// rerun until it ended etl_worker_attempts_exhausted.
func TestDeterministicFinishErrorFailsTheJobAtOnce(t *testing.T) {
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
CREATE FUNCTION reject_marked_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.data LIKE '%reject%' THEN
        RAISE EXCEPTION 'target refuses the row' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER reject_marked_rows BEFORE INSERT ON processed_data
    FOR EACH ROW EXECUTE FUNCTION reject_marked_rows();`); err != nil {
		t.Fatal(err)
	}
	specs := []jobSpec{{payload: records(2, "reject")}}
	for i := range 7 {
		specs = append(specs, jobSpec{payload: records(2, "good"+string(rune('a'+i)))})
	}
	ids := insert(t, pool, specs...)
	cfg := fastConfig()
	cfg.FinishLinger = 50 * time.Millisecond // let the jobs share finish groups
	h := newWorker(t, url, cfg, worker.Hooks{})
	h.start(t)
	testwait.For(t, 60*time.Second, "every job finished", func() bool {
		return h.outcome(metrics.OutcomeSucceeded) == 7 && h.outcome(metrics.OutcomeFailed) == 1
	})
	st, attempts, code := jobState(t, pool, ids[0])
	if st != pg.StatusFailed || attempts != 1 || code == nil || *code != worker.CodeTargetFailure {
		t.Fatalf("refused job %s attempt %d code %v, want FAILED %s on attempt 1", st, attempts, code, worker.CodeTargetFailure)
	}
	if n := count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id = $1`, ids[0]); n != 0 {
		t.Fatalf("refused job has %d target rows, want 0", n)
	}
	for _, id := range ids[1:] {
		if st, attempts, _ := jobState(t, pool, id); st != pg.StatusSucceeded || attempts != 1 {
			t.Fatalf("good job %s attempt %d", st, attempts)
		}
		if n := count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id = $1`, id); n != 2 {
			t.Fatalf("good job loaded %d rows, want 2", n)
		}
	}
	if v := h.outcome(metrics.OutcomeStale); v != 0 {
		t.Fatalf("stale outcomes %v", v)
	}
	pgtest.AssertClaimQueueConsistent(t, pool)
}

// A finish that fails transiently more often than a fixed retry count is
// tried again while the lease is ours, and the computed result lands on the
// attempt it was computed in (issue 12, defect 2). The database raises the
// failure (serialization_failure, 40001) for the first eight target inserts;
// a sequence counts them across rollbacks.
func TestTransientFinishErrorIsRetriedWhileTheLeaseHolds(t *testing.T) {
	pool, url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
CREATE SEQUENCE flaky_target_calls;
CREATE FUNCTION flaky_target() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('flaky_target_calls') <= 8 THEN
        RAISE EXCEPTION 'target briefly unavailable' USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER flaky_target BEFORE INSERT ON processed_data
    FOR EACH ROW EXECUTE FUNCTION flaky_target();`); err != nil {
		t.Fatal(err)
	}
	ids := insert(t, pool, jobSpec{payload: records(3, "flaky")})
	cfg := fastConfig()
	cfg.Concurrency = 1
	h := newWorker(t, url, cfg, worker.Hooks{})
	h.start(t)
	testwait.For(t, 60*time.Second, "job succeeded", func() bool { return h.outcome(metrics.OutcomeSucceeded) == 1 })
	if st, attempts, _ := jobState(t, pool, ids[0]); st != pg.StatusSucceeded || attempts != 1 {
		t.Fatalf("job %s after %d attempts, want SUCCEEDED on the first", st, attempts)
	}
	if n := count(t, pool, `SELECT count(*) FROM processed_data WHERE job_record_id = $1`, ids[0]); n != 3 {
		t.Fatalf("loaded %d rows, want 3", n)
	}
	if n := count(t, pool, `SELECT last_value::int FROM flaky_target_calls`); n < 9 {
		t.Fatalf("the target was called %d times, want the 8 refusals and the success", n)
	}
}
