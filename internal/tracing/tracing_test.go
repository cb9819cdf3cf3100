package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestSetupWithoutEndpointInstallsNothing(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	cfg, shutdown, err := Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	if cfg.Enabled || Enabled() {
		t.Fatal("tracing is on without an endpoint")
	}
	ctx := context.Background()
	got, span := Start(ctx, "x")
	if got != ctx || span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatal("Start with tracing off made a span")
	}
}

func TestSetupRejectsAnUnknownProtocol(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, shutdown, err := Setup(context.Background(), "test")
	defer func() { _ = shutdown(context.Background()) }()
	if err == nil || Enabled() {
		t.Fatalf("Setup accepted OTEL_EXPORTER_OTLP_PROTOCOL=http/json (err %v)", err)
	}
}

func TestSetupWithEndpointEnablesTracing(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	cfg, shutdown, err := Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Enabled || cfg.Protocol != "http/protobuf" || !Enabled() {
		t.Fatalf("cfg %+v, Enabled %v", cfg, Enabled())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing listens; do not wait for the export
	_ = shutdown(ctx)
	if Enabled() {
		t.Fatal("tracing still on after shutdown")
	}
}

func TestStartRecordsWhenOn(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	undo := Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)))
	defer undo()
	_, span := Start(context.Background(), "claim batch", attribute.Int("batch.size", 3))
	span.End()
	if n := len(sr.Ended()); n != 1 {
		t.Fatalf("%d spans ended, want 1", n)
	}
}

// hot stands for a hot-path function such as the finish wrapper: it starts
// a span, sets a finite attribute and ends it.
//
//go:noinline
func hot(ctx context.Context, n int) int {
	ctx, span := Start(ctx, "finish commit")
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("group.size", n))
	}
	_ = ctx
	return n + 1
}

//go:noinline
func bare(ctx context.Context, n int) int {
	_ = ctx
	return n + 1
}

// BenchmarkStartOff compares the traced wrapper with tracing off against the
// same function with no tracing code: the difference is one atomic load.
func BenchmarkStartOff(b *testing.B) {
	ctx := context.Background()
	b.Run("untraced", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_ = bare(ctx, i)
		}
	})
	b.Run("traced-off", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_ = hot(ctx, i)
		}
	})
}
