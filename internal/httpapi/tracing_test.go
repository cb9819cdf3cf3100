package httpapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/intake"
	"github.com/mightyetl/mightyetl/internal/lease"
	"github.com/mightyetl/mightyetl/internal/metrics"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/tracing"
	"github.com/mightyetl/mightyetl/internal/worker"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestSpansCarryNoSecrets runs one job from an HTTP submit through a real
// worker to its finish commit with tracing on, captures every span, and
// checks (design invariant 9) that no span name, attribute or event holds
// the principal, the idempotency key, the payload, a hash, the job id, the
// lease id or SQL text — and that the expected spans exist, the HTTP and
// submit spans continuing the caller's traceparent and the execution span
// linking to it through the stored submit_traceparent.
func TestSpansCarryNoSecrets(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	undo := tracing.Use(tp)
	t.Cleanup(func() { undo(); _ = tp.Shutdown(context.Background()) })

	_, url := pgtest.NewDatabase(t, pgtest.Options{MaxConns: 16})
	ctx := context.Background()
	newPool := func(n int32) *pgxpool.Pool {
		p, err := pg.NewPool(ctx, url, pg.PoolOptions{MaxConns: n}) // with the statement tracer
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	e := newEnvOn(t, newPool(16), url)

	const principal, key = "principal-tracing-secret", "key-tracing-secret-000001"
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	res := e.do(req{Method: "POST", Path: "/api/etl/jobs", Principal: principal, Key: key, Body: sampleBody,
		Header: map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}})
	if res.Status != 202 {
		t.Fatalf("submit: status %d body %s", res.Status, res.Body)
	}
	var s submitted
	res.json(t, &s)

	wreg := prometheus.NewRegistry()
	var mu sync.Mutex
	var claimIDs []string
	// Each handler notes the lease id it ran under.
	handlers := worker.DefaultHandlers(1000)
	for kind, h := range handlers {
		handlers[kind] = func(ctx context.Context, c *lease.Claim) (worker.Output, error) {
			mu.Lock()
			claimIDs = append(claimIDs, c.ClaimID.String())
			mu.Unlock()
			return h(ctx, c)
		}
	}
	w := worker.New(worker.Config{OwnerID: "tracing-test-worker", Concurrency: 2, PollInterval: 20 * time.Millisecond,
		LeaseDuration: 30 * time.Second, RenewInterval: 10 * time.Second, SafetyMargin: 5 * time.Second,
		RetryBaseDelay: time.Millisecond, RetryMaxDelay: time.Millisecond, ShutdownGrace: 5 * time.Second},
		newPool(4), newPool(2), handlers, metrics.NewWorker(wreg), nil)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	waitFor(t, "the job to succeed", func() bool {
		return e.count(`SELECT count(*) FROM etl_job_records WHERE job_record_id = $1 AND job_status = 'SUCCEEDED'`,
			uuid.MustParse(s.JobRecordID)) == 1
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	scope := auth.ScopeHash(testHashKey, principal)
	forbidden := map[string]string{
		"principal": principal, "idempotency key": key, "payload": "jane", "payload amount": "999.9",
		"scope hash": scope, "key hash": intake.SubmissionKeyHash(scope, key),
		"request digest": intake.RequestDigest([]byte(sampleBody)), "job id": s.JobRecordID,
		"SQL": "etl_job_records", "SQL keyword": "SELECT ", "SQL update": "UPDATE ",
	}
	mu.Lock()
	for i, id := range claimIDs {
		forbidden[fmt.Sprintf("lease id %d", i)] = id
	}
	mu.Unlock()
	names := map[string]bool{}
	httpInTrace, submitInTrace, executionLinked := false, false, false
	for _, sp := range sr.Ended() {
		names[sp.Name()] = true
		texts := []string{sp.Name(), sp.Status().Description}
		for _, a := range sp.Attributes() {
			texts = append(texts, string(a.Key), a.Value.String())
		}
		for _, ev := range sp.Events() {
			texts = append(texts, ev.Name)
			for _, a := range ev.Attributes {
				texts = append(texts, string(a.Key), a.Value.String())
			}
		}
		for _, text := range texts {
			for what, secret := range forbidden {
				if strings.Contains(strings.ToLower(text), strings.ToLower(secret)) {
					t.Errorf("span %q carries the %s: %q", sp.Name(), what, text)
				}
			}
		}
		if sp.Name() == "POST /api/etl/jobs" && sp.SpanContext().TraceID().String() == traceID {
			httpInTrace = true
		}
		if sp.Name() == "intake.submit" && sp.SpanContext().TraceID().String() == traceID {
			submitInTrace = true
		}
		if sp.Name() == "worker.execute" {
			for _, l := range sp.Links() {
				if l.SpanContext.TraceID().String() == traceID {
					executionLinked = true
				}
			}
		}
	}
	t.Logf("spans: %v", names)
	if !httpInTrace || !submitInTrace {
		t.Errorf("HTTP span in the caller's trace %v, intake.submit %v", httpInTrace, submitInTrace)
	}
	if !executionLinked {
		t.Error("the worker.execute span has no link to the submit's trace")
	}
	// Exemplars: the pickup latency carries the submit's trace id, the
	// execution time the execution span's.
	exemplars := map[string][]string{}
	families, err := wreg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					exemplars[f.GetName()] = append(exemplars[f.GetName()], l.GetName()+"="+l.GetValue())
				}
			}
		}
	}
	if got := exemplars["mightyetl_job_pickup_latency_seconds"]; !slices.Contains(got, "trace_id="+traceID) {
		t.Errorf("pickup latency exemplars %v, want trace_id=%s", got, traceID)
	}
	if got := exemplars["mightyetl_job_execution_seconds"]; len(got) == 0 {
		t.Error("execution time has no exemplar")
	}
	om := e.do(req{Method: "GET", Path: "/metrics", Header: map[string]string{"Accept": "application/openmetrics-text; version=1.0.0"}})
	if ct := om.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("/metrics answered %q to an OpenMetrics scrape", ct)
	}

	for _, want := range []string{"intake.submit", "intake.group_commit", "worker.claim",
		"db lease.claim", "worker.execute", "worker.finish", "db lease.succeed"} {
		if !names[want] {
			t.Errorf("no %q span; spans: %v", want, names)
		}
	}
	// The traced insert: the plain INSERT, or the ON CONFLICT statement
	// while the process-wide conflict cooldown of pg.InsertJobs runs (an
	// earlier test of this package resubmitted a key).
	if !names["db jobs.insert_traced_plain"] && !names["db jobs.insert_traced"] {
		t.Errorf("no traced insert span; spans: %v", names)
	}
}
