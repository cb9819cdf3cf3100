package clientcontract_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mightyetl/mightyetl/client"
	"github.com/mightyetl/mightyetl/internal/pgbouncertest"
	"github.com/mightyetl/mightyetl/internal/testwait"
)

// poolerSize is PgBouncer's default_pool_size in these tests: the intake's
// pools (request 4, health 1, relay 2) and the worker's (execution 6,
// renewal 2) share 5 server connections, so transactions of different
// pools and processes really follow each other on one server connection.
const poolerSize = 5

// throughPgBouncer puts a private PgBouncer in transaction mode between the
// stack and its database: DATABASE_URL goes through it with
// MIGHTYETL_DATABASE_POOLER=transaction; with direct, the outbox relay
// LISTENs on MIGHTYETL_DATABASE_DIRECT_URL (the database itself), without
// it the relay polls.
func throughPgBouncer(t *testing.T, direct bool) stackOption {
	return func(env map[string]string) {
		b := pgbouncertest.Start(t, pgbouncertest.Options{PoolSize: poolerSize})
		dbURL := env["DATABASE_URL"]
		env["DATABASE_URL"] = b.URL(dbURL)
		env["MIGHTYETL_DATABASE_POOLER"] = "transaction"
		if direct {
			env["MIGHTYETL_DATABASE_DIRECT_URL"] = dbURL
		}
		// Short leases, so a job that runs longer than one lease finishes
		// only if its renewals went through the pooler.
		env["MIGHTYETL_LEASE_DURATION"] = "3s"
		env["MIGHTYETL_OUTBOX_POLL_INTERVAL"] = "200ms"
	}
}

// lifecycleEvents collects the lifecycle events the relay publishes under
// the stack's prefix, by job and status.
type lifecycleEvents struct {
	mu   sync.Mutex
	seen map[string]bool // jobID + " " + status
}

func (s *stack) watchLifecycle() *lifecycleEvents {
	s.t.Helper()
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	ev := &lifecycleEvents{seen: map[string]bool{}}
	_, err = nc.Subscribe(s.prefix+".lifecycle.>", func(m *nats.Msg) {
		var e struct {
			Data struct {
				JobRecordID string `json:"jobRecordId"`
				JobStatus   string `json:"jobStatus"`
			} `json:"data"`
		}
		if json.Unmarshal(m.Data, &e) == nil {
			ev.mu.Lock()
			ev.seen[e.Data.JobRecordID+" "+e.Data.JobStatus] = true
			ev.mu.Unlock()
		}
	})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		s.t.Fatal(err)
	}
	return ev
}

func (e *lifecycleEvents) has(jobID, status string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[jobID+" "+status]
}

// TestCorePathsThroughPgBouncer runs the service's core paths with every
// pool of the intake and the worker going through a real PgBouncer in
// transaction mode (pool size 5): submit over HTTP and over NATS (and the
// same key again), status and list reads, claim, a job that outlives its
// lease by renewals, finish with its target rows, cancel of a running job
// (revoked at the worker), a failing job and its replay, the synchronous process call, and the outbox
// relay publishing lifecycle events, polling (no direct URL) and on LISTEN
// over the direct URL.
func TestCorePathsThroughPgBouncer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		direct bool
	}{{"relay polls", false}, {"relay listens on the direct URL", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, true, throughPgBouncer(t, tc.direct))
			corePaths(t, s)
			if tc.direct {
				// The relay's LISTEN session is on the database itself, as
				// the intake (application_name = its NATS name).
				testwait.For(t, time.Minute, "the relay's LISTEN session on the direct URL", func() bool {
					var n int
					err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'mightyetl-client-test' AND query ILIKE 'listen %'`).Scan(&n)
					return err == nil && n == 1
				})
			}
		})
	}
}

func corePaths(t *testing.T, s *stack) {
	c := s.client()
	ctx := ctxT(t, 3*time.Minute)
	ev := s.watchLifecycle()

	// Submit over HTTP, the same key again, read it back.
	sub, err := c.Submit(ctx, []byte(sample), "")
	if err != nil {
		t.Fatalf("submit through the pooler: %v", err)
	}
	again, err := c.Submit(ctx, []byte(sample), sub.Key)
	if err != nil || again.JobID != sub.JobID || !again.Replayed {
		t.Fatalf("resubmission %+v, %v", again, err)
	}
	// Over NATS: the intake's request consumer inserts it.
	nsub, err := s.producer(testUser).PublishAndWait(ctx, []byte(`[{"id":"n1","name":"nats"}]`), "")
	if err != nil {
		t.Fatalf("submit over NATS through the pooler: %v", err)
	}
	// A job longer than its 3 s lease: it succeeds in one attempt only if
	// the worker's renewals went through.
	long, err := c.SubmitDiagnostic(ctx, client.DiagnosticRequest{DurationMillis: 4500}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{sub.JobID, nsub.JobID, long.JobID} {
		done, err := c.Wait(ctx, id)
		if err != nil || done.Status != client.StatusSucceeded || done.AttemptCount != 1 {
			t.Fatalf("job %s through the pooler: %+v, %v (want SUCCEEDED in one attempt)", id, done, err)
		}
	}
	var rows int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM processed_data WHERE job_record_id = $1`, sub.JobID).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("target rows of %s: %d, %v; want 1", sub.JobID, rows, err)
	}

	// Cancel a running job: it is CANCELLED, and the worker goes on.
	running, err := c.SubmitDiagnostic(ctx, client.DiagnosticRequest{DurationMillis: 600000}, "")
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 2*time.Minute, "the long job RUNNING", func() bool {
		j, err := c.Get(ctx, running.JobID)
		return err == nil && j.Status == client.StatusRunning
	})
	cn, err := c.Cancel(ctx, running.JobID, "")
	if err != nil || cn.Job.Status != client.StatusCancelled {
		t.Fatalf("cancel of a running job through the pooler: %+v, %v", cn, err)
	}
	// A job that fails, and its replay (same body: a new job, failing
	// again); then a synchronous process call.
	failed, err := c.SubmitDiagnostic(ctx, client.DiagnosticRequest{FailWith: "permanent"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if done, err := c.Wait(ctx, failed.JobID); err != nil || done.Status != client.StatusFailed {
		t.Fatalf("failing job %+v, %v", done, err)
	}
	rp, err := c.Replay(ctx, failed.JobID, []byte(`{"failWith":"permanent"}`), "")
	if err != nil || rp.Status != client.StatusPending || rp.JobID == failed.JobID {
		t.Fatalf("replay through the pooler %+v, %v", rp, err)
	}
	if done, err := c.Wait(ctx, rp.JobID); err != nil || done.Status != client.StatusFailed || done.ReplaySourceID != failed.JobID {
		t.Fatalf("replayed job %+v, %v", done, err)
	}
	recs := []byte(`[{"id":"p1","name":"x"},{"id":"p2","name":"y"}]`)
	pr, err := c.Process(ctx, recs, "")
	if err != nil || strings.Join(pr.Processed, ",") != "p1,p2" {
		t.Fatalf("process %+v, %v", pr, err)
	}
	page, err := c.List(ctx, client.ListOptions{Limit: 100})
	if err != nil || len(page.Jobs) != 6 {
		t.Fatalf("list %+v, %v (want 6 jobs)", page, err)
	}
	if page, err = c.List(ctx, client.ListOptions{Status: client.StatusCancelled}); err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != running.JobID {
		t.Fatalf("list cancelled %+v, %v", page, err)
	}

	// The relay published the lifecycle of every job.
	testwait.For(t, time.Minute, "lifecycle events published by the relay", func() bool {
		return ev.has(sub.JobID, "SUCCEEDED") && ev.has(nsub.JobID, "SUCCEEDED") && ev.has(long.JobID, "SUCCEEDED") &&
			ev.has(running.JobID, "CANCELLED") && ev.has(failed.JobID, "FAILED") && ev.has(rp.JobID, "FAILED")
	})
	// The worker renewed through the pooler, got the relay's revocation of
	// the cancelled job and let go of it: no claim left running.
	testwait.For(t, time.Minute, "the worker's revocation and no running claim", func() bool {
		return s.workerMetric("mightyetl_worker_revocations_received_total", "") >= 1 &&
			s.workerMetric("mightyetl_worker_running_jobs", "") == 0
	})
	if n := s.workerMetric("mightyetl_lease_renewals_total", "renewed"); n < 1 {
		t.Fatalf("renewals renewed = %v through the pooler, want at least 1", n)
	}
}

// workerMetric is the sum of the stack worker's samples of the counter or
// gauge name (with label outcome=outcome when outcome is not empty).
func (s *stack) workerMetric(name, outcome string) float64 {
	s.t.Helper()
	s.mu.Lock()
	wp := s.worker
	s.mu.Unlock()
	mfs, err := wp.Registry.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := outcome == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					match = true
				}
			}
			if !match {
				continue
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
