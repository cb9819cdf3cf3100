package natsbridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/testwait"
	"github.com/mightyetl/mightyetl/internal/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A NATS request whose headers carry a W3C traceparent is consumed in that
// trace: the consume and submit spans share the producer's trace id, and the
// job stores the submit's traceparent for the worker to link to.
func TestNATSRequestContinuesTheTraceparentHeader(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	undo := tracing.Use(tp)
	t.Cleanup(func() { undo(); _ = tp.Shutdown(context.Background()) })

	b := setup(t)
	pool, url, prefix, js := b.pool, b.url, b.prefix, b.js
	startRequestBridge(t, pool, js, url, prefix, "bridge-trace-test")

	const traceID = "0af7651916cd43dd8448eb211c80319c"
	publish(t, js, prefix+".requests.alice", "nats-trace-key-000001", `[{"id":"a1"}]`,
		"traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
	testwait.For(t, 30*time.Second, "the job", func() bool { return jobs(t, pool) == 1 })

	var stored string
	if err := pool.QueryRow(context.Background(),
		`SELECT coalesce(submit_traceparent, '') FROM etl_job_records`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stored, "00-"+traceID+"-") || len(stored) != 55 {
		t.Errorf("stored traceparent %q, want one in trace %s", stored, traceID)
	}
	seen := map[string]bool{}
	testwait.For(t, 10*time.Second, "consume and submit spans", func() bool {
		for _, sp := range sr.Ended() {
			if sp.SpanContext().TraceID().String() == traceID {
				seen[sp.Name()] = true
			}
		}
		return seen["nats.request.consume"] && seen["intake.submit"]
	})
}
