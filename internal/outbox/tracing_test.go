package outbox

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/pg"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// With tracing on, a lifecycle CloudEvent carries the job's stored submit
// traceparent as the distributed-tracing extension attribute; a job without
// one gets none. (Not parallel: tracing is process-wide.)
func TestLifecycleEventsCarryTheSubmitTraceparent(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	undo := tracing.Use(tp)
	t.Cleanup(func() { undo(); _ = tp.Shutdown(context.Background()) })

	f := newFixture(t, "")
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ids := pgtest.InsertJobs(t, f.pool, pg.NewJob{SubmitTraceparent: traceparent}, pg.NewJob{})
	traced, untraced := lifecycle("SUCCEEDED", ""), lifecycle("SUCCEEDED", "")
	traced.jobID, untraced.jobID = ids[0], ids[1]
	f.insert(t, traced, untraced)
	r := f.relay(t, nil, Options{})
	if _, err := r.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	st, err := f.js.Stream(t.Context(), f.subjects.LifecycleStream())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{traceparent, ""} {
		msg, err := st.GetMsg(t.Context(), uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		var ce events.CloudEvent
		if err := json.Unmarshal(msg.Data, &ce); err != nil {
			t.Fatal(err)
		}
		if ce.Traceparent != want {
			t.Errorf("event %d traceparent %q, want %q", i+1, ce.Traceparent, want)
		}
	}
}
